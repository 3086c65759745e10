package partition

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// failingStorage answers every read and write with err.
type failingStorage struct {
	storage.Interface
	err error
}

func (f failingStorage) Create(context.Context, string, runtime.Object, runtime.Object, uint64) error {
	return f.err
}

func (f failingStorage) Delete(context.Context, string, runtime.Object, *storage.Preconditions, storage.ValidateObjectFunc, runtime.Object, storage.DeleteOptions) error {
	return f.err
}

func (f failingStorage) GuaranteedUpdate(context.Context, string, runtime.Object, bool, *storage.Preconditions, storage.UpdateFunc, runtime.Object) error {
	return f.err
}

func (f failingStorage) Get(context.Context, string, storage.GetOptions, runtime.Object) error {
	return f.err
}

func (f failingStorage) GetList(context.Context, string, storage.ListOptions, runtime.Object) error {
	return f.err
}

var testResource = schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}

// storageOps are the storage calls of each request, each followed by the
// registry Store's interpretation of its error (upstream's
// storage/errors.go), as the Store does.
var storageOps = []struct {
	verb  string
	write bool
	call  func(ctx context.Context, s storage.Interface) error
}{
	{"create", true, func(ctx context.Context, s storage.Interface) error {
		return storeerr.InterpretCreateError(s.Create(ctx, "/apis.kcp.io/apiexports/x", nil, nil, 0), testResource, "x")
	}},
	{"update", true, func(ctx context.Context, s storage.Interface) error {
		return storeerr.InterpretUpdateError(s.GuaranteedUpdate(ctx, "/apis.kcp.io/apiexports/x", nil, false, nil, nil, nil), testResource, "x")
	}},
	{"delete", true, func(ctx context.Context, s storage.Interface) error {
		return storeerr.InterpretDeleteError(s.Delete(ctx, "/apis.kcp.io/apiexports/x", nil, nil, nil, nil, storage.DeleteOptions{}), testResource, "x")
	}},
	{"get", false, func(ctx context.Context, s storage.Interface) error {
		return storeerr.InterpretGetError(s.Get(ctx, "/apis.kcp.io/apiexports/x", storage.GetOptions{}, nil), testResource, "x")
	}},
	{"list", false, func(ctx context.Context, s storage.Interface) error {
		return storeerr.InterpretListError(s.GetList(ctx, "/apis.kcp.io/apiexports", storage.ListOptions{}, nil), testResource)
	}},
}

// answerOf is the HTTP answer upstream's response writer gives err.
func answerOf(t *testing.T, err error) (*httptest.ResponseRecorder, *metav1.Status) {
	t.Helper()
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept", "application/json")
	responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{}, rec, req)
	return rec, responsewriters.ErrorToAPIStatus(err)
}

// Each error of etcd or its client that means "try again" is answered 503
// with Retry-After, naming etcd, for every read and write; a write says it
// may have been stored. etcd's quota is 507: nothing was written. A
// client's mistake keeps its 4xx, and an error that does not mean "try
// again" stays upstream's 500.
func TestEtcdErrorsThatMeanTryAgainAnswer503(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		// etcd's errors, as the etcd client returns them (EtcdError).
		{"request timed out", rpctypes.ErrTimeout, 503},
		{"timed out after a leader failure", rpctypes.ErrTimeoutDueToLeaderFail, 503},
		{"timed out, connection lost", rpctypes.ErrTimeoutDueToConnectionLost, 503},
		{"leader changed", rpctypes.ErrLeaderChanged, 503},
		{"server stopped", rpctypes.ErrStopped, 503},
		{"no leader", rpctypes.ErrNoLeader, 503},
		{"too many requests", rpctypes.ErrTooManyRequests, 503},
		{"unhealthy cluster", rpctypes.ErrUnhealthy, 503},
		// As gRPC statuses: etcd's own, raft's (Unknown), the transport's.
		{"gRPC leader changed", rpctypes.ErrGRPCLeaderChanged, 503},
		{"raft stopped", status.Error(codes.Unknown, "raft: stopped"), 503},
		{"raft proposal dropped", status.Error(codes.Unknown, "raft proposal dropped"), 503},
		{"connection refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:2379: connect: connection refused"`), 503},
		{"connection closed", status.Error(codes.Unavailable, "error reading from server: EOF"), 503},
		{"gRPC deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), 503},
		{"client closing", status.Error(codes.Canceled, "grpc: the client connection is closing"), 503},
		{"context deadline", context.DeadlineExceeded, 503},
		{"no endpoints", clientv3.ErrNoAvailableEndpoints, 503},
		{"unreachable", storage.NewUnreachableError("/apis.kcp.io/apiexports/x", 0), 503},
		// Wrapped on the way: storage's internal error (the union's reads)
		// and an error that wraps one, or only quotes it.
		{"internal error of a leader change", storage.NewInternalError(rpctypes.ErrLeaderChanged), 503},
		{"wrapped no leader", fmt.Errorf("reading: %w", rpctypes.ErrNoLeader), 503},
		{"quoted request timed out", fmt.Errorf("reading: %v", rpctypes.ErrGRPCTimeout), 503},

		// A client's mistake, answered by storage or a layer above it.
		{"bad request", apierrors.NewBadRequest("invalid resourceVersion"), 400},
		{"forbidden", apierrors.NewForbidden(testResource, "x", errors.New("not yours")), 403},
		{"not found", apierrors.NewNotFound(testResource, "x"), 404},
		{"conflict", apierrors.NewConflict(testResource, "x", errors.New("resourceVersion changed")), 409},
		{"expired", apierrors.NewResourceExpired("too old"), 410},
		{"too many requests answered", apierrors.NewTooManyRequests("storage is (re)initializing", 1), 429},

		// etcd's quota: nothing was written, and trying again will not
		// help until space is freed.
		{"database space exceeded", rpctypes.ErrNoSpace, 507},
		{"gRPC database space exceeded", rpctypes.ErrGRPCNoSpace, 507},
		{"wrapped database space exceeded", storage.NewInternalError(rpctypes.ErrNoSpace), 507},
		{"quoted database space exceeded", fmt.Errorf("committing: %v", rpctypes.ErrGRPCNoSpace), 507},

		// Anything else stays 500.
		{"unknown", errors.New("something broke"), 500},
		{"corrupt cluster", rpctypes.ErrCorrupt, 500},
		{"request too large", rpctypes.ErrRequestTooLarge, 500},
		{"gRPC internal", status.Error(codes.Internal, "stream terminated"), 500},
		{"decoding", storage.NewInternalError(errors.New("decoding: invalid character")), 500},
		{"context canceled", context.Canceled, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := withEtcdAnswers(failingStorage{err: tc.err}, testResource)
			for _, op := range storageOps {
				rec, st := answerOf(t, op.call(context.Background(), s))
				if rec.Code != tc.want {
					t.Errorf("%s: answered %d (%s: %s), want %d", op.verb, rec.Code, st.Reason, st.Message, tc.want)
					continue
				}
				if tc.want == http.StatusInsufficientStorage {
					if st.Reason != ReasonInsufficientStorage || !strings.Contains(st.Message, "nothing was written") ||
						!strings.Contains(st.Message, "the "+op.verb+" of apiexports.apis.kcp.io") || rec.Header().Get("Retry-After") != "" {
						t.Errorf("%s: status %+v, Retry-After %q; want reason %s, a message that says nothing was written and names the %s, no Retry-After",
							op.verb, st, rec.Header().Get("Retry-After"), ReasonInsufficientStorage, op.verb)
					}
					continue
				}
				if tc.want != http.StatusServiceUnavailable {
					continue
				}
				if got := rec.Header().Get("Retry-After"); got != "1" {
					t.Errorf("%s: Retry-After %q, want 1", op.verb, got)
				}
				if st.Reason != metav1.StatusReasonServiceUnavailable || st.Details == nil || st.Details.RetryAfterSeconds != 1 ||
					len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != CauseEtcdUnavailable {
					t.Errorf("%s: status %+v, want reason ServiceUnavailable, retryAfterSeconds 1 and the cause %s", op.verb, st, CauseEtcdUnavailable)
				}
				if !strings.HasPrefix(st.Message, "etcd ") || !strings.Contains(st.Message, "the "+op.verb+" of apiexports.apis.kcp.io") {
					t.Errorf("%s: message %q does not name etcd and the %s", op.verb, st.Message, op.verb)
				}
				if mayBeStored := strings.Contains(st.Message, "may or may not have been stored"); mayBeStored != op.write {
					t.Errorf("%s: message %q; a write must say that it may have been stored, a read must not", op.verb, st.Message)
				}
			}
		})
	}
}

// A request whose context has ended keeps its error: its client is gone,
// or upstream's timeout filter has answered it already. A request's own
// verb (a patch reaches storage as an update) names what failed.
func TestEtcdAnswersLeaveEndedRequestsAndNameTheRequestVerb(t *testing.T) {
	s := withEtcdAnswers(failingStorage{err: rpctypes.ErrLeaderChanged}, testResource)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Create(ctx, "/apis.kcp.io/apiexports/x", nil, nil, 0); !errors.Is(err, rpctypes.ErrLeaderChanged) {
		t.Errorf("a create whose request ended: %v, want etcd's error as it was", err)
	}
	ctx = request.WithRequestInfo(context.Background(), &request.RequestInfo{Verb: "patch"})
	err := s.GuaranteedUpdate(ctx, "/apis.kcp.io/apiexports/x", nil, false, nil, nil, nil)
	if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), `the patch of apiexports.apis.kcp.io "x"`) {
		t.Errorf("a patch: %v, want 503 naming the patch of the object", err)
	}
}
