package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/klog/v2"
)

// An etcd that cannot serve a request now (a leader election, a member
// stopping, a lost quorum, a connection gone) reaches upstream's storage as
// the etcd client's error, unchanged: k8s.io/apiserver's etcd3 store
// (storage/etcd3/store.go) returns it as it is; the registry Store's
// InterpretCreateError, InterpretUpdateError, InterpretGetError, ...
// (k8s.io/apiserver/pkg/storage/errors/storage.go) pass on what is not one
// of storage's own errors, and turn storage.NewInternalError (which the
// union's reads wrap etcd's errors in) into apierrors.NewInternalError;
// and responsewriters.ErrorToAPIStatus answers anything that is not an
// APIStatus with 500. A client takes a 500 for a
// fault of the server and does not retry it. So the outermost storage of
// every resource (etcdAnswers) answers these errors itself: 503
// ServiceUnavailable with Retry-After, naming etcd, before upstream sees
// them. Only errors that mean "try again" are answered so; every other
// error (a client's mistake, a corrupt object, anything unknown) stays as
// upstream answers it, but for etcd's quota (etcdNoSpaceAnswer): 507.

// ReasonInsufficientStorage is the reason of a write refused, and not
// done, for want of space (507): etcd's database at its quota here, the
// server's memory or disk full in package filters.
const ReasonInsufficientStorage metav1.StatusReason = "InsufficientStorage"

// etcdNoSpace is the message of etcd's ErrNoSpace: the database reached
// its quota (--embedded-etcd-quota-backend-bytes, etcd's
// --quota-backend-bytes) and etcd raised its NOSPACE alarm. etcd refuses
// a write before applying it while the alarm is raised, and goes on
// refusing every write that adds data until the space is freed
// (compaction, defragmentation) and the alarm disarmed; reads and deletes
// go on. But the write that crosses the quota is applied and answered
// with the same error (etcd's quotaApplierV3.Put and Txn,
// server/etcdserver/apply/apply.go, apply first and then report the
// quota), so a write answered so is read back before it is called
// refused (etcdAnswers.appliedAnyway).
const etcdNoSpace = "etcdserver: mvcc: database space exceeded"

// isEtcdNoSpace reports whether err is etcd's ErrNoSpace, however the
// etcd client or a layer on the way wrapped or quoted it.
func isEtcdNoSpace(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return false
	}
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) || strings.Contains(err.Error(), etcdNoSpace)
}

// etcdNoSpaceAnswer is the 507 answer to a write etcd refused for its
// quota (isEtcdNoSpace), or nil for any other error. Not a 500: the
// client did nothing wrong and the server is not broken; not a 503 that
// says "try again, it may have been stored": nothing was, and trying
// again will not help until an operator frees space.
func etcdNoSpaceAnswer(ctx context.Context, err error, verb string, gr schema.GroupResource, name string) *apierrors.StatusError {
	if !isEtcdNoSpace(err) {
		return nil
	}
	if info, ok := request.RequestInfoFrom(ctx); ok && info.Verb != "" {
		verb = info.Verb
	}
	what := gr.String()
	if name != "" {
		what += fmt.Sprintf(" %q", name)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusInsufficientStorage,
		Reason: ReasonInsufficientStorage,
		Message: fmt.Sprintf("nothing was written: etcd refused the %s of %s: its database is at its quota (%v); writes are refused until space is freed (compaction, defragmentation, the NOSPACE alarm disarmed) or the quota raised; reads and deletes go on",
			verb, what, err),
		Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: name},
	}}
}

// CauseEtcdUnavailable is the cause type, in the details of a 503, of a
// request that etcd could not serve at the time; its message is etcd's.
const CauseEtcdUnavailable = "EtcdUnavailable"

// etcdRetryAfterSeconds is what a client refused for etcd is told to wait:
// about an election's time.
const etcdRetryAfterSeconds = 1

// etcdTryAgain are the messages of etcd's errors that mean "try again",
// whatever gRPC code carries them (raft's arrive as Unknown) and
// however an error on the way wrapped them.
var etcdTryAgain = []string{
	"etcdserver: request timed out", // and its variants: "..., possibly due to previous leader failure", ...
	"etcdserver: leader changed",
	"etcdserver: server stopped",
	"etcdserver: no leader",
	"etcdserver: too many requests",
	"etcdserver: unhealthy cluster",
	"raft: stopped",
	"raft proposal dropped", // no leader to take a write
}

// isEtcdUnavailable reports whether err is etcd, or the etcd client, saying
// that the request could not be served now and may succeed if tried again:
// one of etcdTryAgain, a gRPC Unavailable or DeadlineExceeded (no
// connection, a member gone, etcd's own deadline), a connection closing
// under the request (gRPC Canceled that is not a context's), no endpoint
// available, a deadline passed, or storage's "unreachable". An error that
// is already an API status is an answer, not etcd's: false.
func isEtcdUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return false
	}
	switch {
	case storage.IsUnreachable(err),
		errors.Is(err, clientv3.ErrNoAvailableEndpoints),
		errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.Is(err, context.Canceled):
		return false
	}
	msg := err.Error()
	for _, s := range etcdTryAgain {
		if strings.Contains(msg, s) {
			return true
		}
	}
	var code codes.Code
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else {
		return false
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// etcdUnavailable is the 503 answer to a request that etcd could not serve
// (isEtcdUnavailable), or nil for any other error. verb is the storage's
// operation, overridden by the request's own verb when there is one;
// writes say that they may have been stored: etcd may have committed a
// write whose answer was lost.
func etcdUnavailable(ctx context.Context, err error, verb string, write bool, gr schema.GroupResource, name string) *apierrors.StatusError {
	if !isEtcdUnavailable(err) {
		return nil
	}
	if info, ok := request.RequestInfoFrom(ctx); ok && info.Verb != "" {
		verb = info.Verb
	}
	what := gr.String()
	if name != "" {
		what += fmt.Sprintf(" %q", name)
	}
	msg := fmt.Sprintf("etcd could not serve the %s of %s now: %v; try again", verb, what, err)
	if write {
		msg = fmt.Sprintf("etcd did not confirm the %s of %s: %v; the write may or may not have been stored: read the object before writing it again", verb, what, err)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: msg,
		Details: &metav1.StatusDetails{
			Group: gr.Group, Kind: gr.Resource, Name: name,
			RetryAfterSeconds: etcdRetryAfterSeconds,
			Causes:            []metav1.StatusCause{{Type: CauseEtcdUnavailable, Message: err.Error()}},
		},
	}}
}

// etcdAnswers is the outermost storage of a resource: it answers the errors
// of etcd that mean "try again" with 503 (etcdUnavailable) and passes
// everything else on. It embeds the storage, so that whatever else the
// storage implements (a fork's additions included) is passed on as well.
type etcdAnswers struct {
	storage.Interface
	groupResource schema.GroupResource
}

// withEtcdAnswers wraps s, the storage of gr, in etcdAnswers.
func withEtcdAnswers(s storage.Interface, gr schema.GroupResource) storage.Interface {
	return etcdAnswers{Interface: s, groupResource: gr}
}

// answer is err, or its 503 when etcd could not serve the request. When
// the request's context has ended, the error is left as it is: its client
// is gone, or the request timed out and upstream's timeout filter answered.
func (s etcdAnswers) answer(ctx context.Context, err error, verb string, write bool, key string) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	name := ""
	if key != "" {
		name = path.Base(key)
	}
	if st := etcdUnavailable(ctx, err, verb, write, s.groupResource, name); st != nil {
		return st
	}
	if st := etcdNoSpaceAnswer(ctx, err, verb, s.groupResource, name); st != nil {
		return st
	}
	return err
}

func (s etcdAnswers) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	err := s.Interface.Create(ctx, key, obj, out, ttl)
	if isEtcdNoSpace(err) && ctx.Err() == nil {
		if applied, readErr := s.appliedAnyway(ctx, key, true, obj, "", out); readErr != nil {
			return s.unsureAfterQuota(ctx, "create", key, err, readErr)
		} else if applied {
			return nil
		}
	}
	return s.answer(ctx, err, "create", true, key)
}

func (s etcdAnswers) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	return s.answer(ctx, s.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts), "delete", true, key)
}

func (s etcdAnswers) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	// The last object tryUpdate made, and the resourceVersion it was made
	// from, are what the write etcd answered wrote, if anything.
	var attempted runtime.Object
	var from string
	recording := tryUpdate
	if tryUpdate != nil {
		recording = func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
			out, ttl, err := tryUpdate(input, res)
			attempted, from = out, ""
			if m, mErr := meta.Accessor(input); mErr == nil {
				from = m.GetResourceVersion()
			}
			return out, ttl, err
		}
	}
	err := s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, recording, cachedExistingObject)
	if isEtcdNoSpace(err) && ctx.Err() == nil && attempted != nil {
		if applied, readErr := s.appliedAnyway(ctx, key, false, attempted, from, destination); readErr != nil {
			return s.unsureAfterQuota(ctx, "update", key, err, readErr)
		} else if applied {
			return nil
		}
	}
	return s.answer(ctx, err, "update", true, key)
}

// appliedAnyway reads key back after etcd answered a write of attempted
// with its quota error (etcdNoSpace) and reports whether etcd applied it:
// the object stored is what attempted wrote (sameWrite), at another
// resourceVersion than from (the one an update was made from). It reads
// the stored object into out. A key that is gone was not written.
func (s etcdAnswers) appliedAnyway(ctx context.Context, key string, create bool, attempted runtime.Object, from string, out runtime.Object) (bool, error) {
	if attempted == nil || out == nil {
		return false, nil
	}
	// Read into out itself: a write answered with an error leaves out
	// unread, and one answered as done answers with what is stored.
	current := out
	if err := s.Interface.Get(ctx, key, storage.GetOptions{}, current); err != nil {
		if storage.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	stored, err := meta.Accessor(current)
	if err != nil {
		return false, err
	}
	rv := stored.GetResourceVersion()
	if rv == from {
		return false, nil
	}
	want := attempted.DeepCopyObject()
	wantMeta, err := meta.Accessor(want)
	if err != nil {
		return false, err
	}
	if !sameWrite(create, wantMeta, stored, want, current) {
		return false, nil
	}
	klog.FromContext(ctx).Info("etcd applied a write it answered with its quota error; the write is answered as done", "key", key, "resourceVersion", rv)
	return true, nil
}

// sameWrite reports whether stored (current, read back) is what attempted
// (want) wrote. A create's object has a uid of its own (the registry's
// BeforeCreate makes one for every attempt), which says it; otherwise the
// two must encode alike at one resourceVersion, as stored encodings do:
// times in whole seconds, which an object that was never stored may hold
// finer.
func sameWrite(create bool, attempted, stored metav1.Object, want, current runtime.Object) bool {
	if uid := attempted.GetUID(); create && uid != "" {
		return uid == stored.GetUID()
	}
	attempted.SetResourceVersion(stored.GetResourceVersion())
	a, errA := json.Marshal(want)
	b, errB := json.Marshal(current)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// unsureAfterQuota is the answer to a write etcd answered with its quota
// error when reading it back failed: it may have been applied (etcdNoSpace),
// so it is not called refused; 503, to be tried again.
func (s etcdAnswers) unsureAfterQuota(ctx context.Context, verb, key string, quotaErr, readErr error) error {
	if info, ok := request.RequestInfoFrom(ctx); ok && info.Verb != "" {
		verb = info.Verb
	}
	name := path.Base(key)
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusServiceUnavailable,
		Reason: metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("etcd answered the %s of %s %q with its quota error (%v), which it also gives the write that crosses the quota after applying it, and reading the object back failed (%v): it may or may not have been stored",
			verb, s.groupResource, name, quotaErr, readErr),
		Details: &metav1.StatusDetails{Group: s.groupResource.Group, Kind: s.groupResource.Resource, Name: name, RetryAfterSeconds: etcdRetryAfterSeconds,
			Causes: []metav1.StatusCause{{Type: CauseEtcdUnavailable, Message: readErr.Error()}}},
	}}
}

func (s etcdAnswers) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return s.answer(ctx, s.Interface.Get(ctx, key, opts, objPtr), "get", false, key)
}

func (s etcdAnswers) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	return s.answer(ctx, s.Interface.GetList(ctx, key, opts, listObj), "list", false, "")
}

func (s etcdAnswers) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(ctx, key, opts)
	return w, s.answer(ctx, err, "watch", false, "")
}

func (s etcdAnswers) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	rv, err := s.Interface.GetCurrentResourceVersion(ctx)
	return rv, s.answer(ctx, err, "read of the current revision", false, "")
}
