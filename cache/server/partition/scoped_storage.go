package partition

import (
	"context"
	"fmt"
	"path"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// scopedStorage is the outermost storage.Interface of every resource. The
// registry Store hands it keys without a partition; it inserts the partition
// from the request scope, stamps the partition annotations on writes (as
// Admission has, for requests; again here for any write that comes another
// way), and turns wildcard reads into prefix reads with field filters.
type scopedStorage struct {
	delegate       storage.Interface
	resourcePrefix string
	// registryPrefix is the resource prefix of the keys the registry hands
	// over: resourcePrefix, but for kcp's fork's custom resources (see
	// upstreamResourcePrefix).
	registryPrefix string
	groupResource  schema.GroupResource
}

var _ storage.Interface = &scopedStorage{}

// everything is the scope of internal readers that carry no request scope,
// such as upstream's CRD finalizer, which lists instances before a CRD goes.
var everything = kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}

// fromRegistry puts a key the registry built below resourcePrefix.
func (s *scopedStorage) fromRegistry(key string) string {
	if s.registryPrefix == s.resourcePrefix {
		return key
	}
	if rest, ok := kcpcache.CutPathPrefix(key, s.registryPrefix); ok {
		return s.resourcePrefix + rest
	}
	return key
}

func (s *scopedStorage) Versioner() storage.Versioner { return s.delegate.Versioner() }

func (s *scopedStorage) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	sc, err := s.writeScope(ctx, "create")
	if err != nil {
		return err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if err := stampPartition(m, sc); err != nil {
		return err
	}
	k, err := scopedKey(s.resourcePrefix, sc, s.fromRegistry(key))
	if err != nil {
		return err
	}
	return s.delegate.Create(storageContext(ctx, sc), k, obj, out, ttl)
}

func (s *scopedStorage) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	sc, err := s.writeScope(ctx, "delete")
	if err != nil {
		return err
	}
	k, err := scopedKey(s.resourcePrefix, sc, s.fromRegistry(key))
	if err != nil {
		return err
	}
	return s.delegate.Delete(storageContext(ctx, sc), k, out, preconditions, validateDeletion, cachedExistingObject, opts)
}

func (s *scopedStorage) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	k, opts, sc, err := s.readRequest(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	w, err := s.delegate.Watch(storageContext(ctx, sc), k, opts)
	if err != nil || !s.hidesBookkeeping(ctx) {
		return w, err
	}
	return watchWithoutBookkeeping(w), nil
}

func (s *scopedStorage) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("reading %s without a cache scope in the request context", s.groupResource))
	}
	if sc.IsWildcard() {
		return apierrors.NewBadRequest(fmt.Sprintf("cannot get %s by name in the wildcard scope %s: name one shard and one cluster, or list with fieldSelector=metadata.name=<name>", s.groupResource, sc))
	}
	k, err := scopedKey(s.resourcePrefix, sc, s.fromRegistry(key))
	if err != nil {
		return err
	}
	if err := s.delegate.Get(storageContext(ctx, sc), k, opts, objPtr); err != nil {
		return err
	}
	if !sc.IsSystem() && isDeletion(ctx) {
		m, err := meta.Accessor(objPtr)
		if err != nil {
			return err
		}
		forgetFinalizers(m)
	}
	if s.hidesBookkeeping(ctx) {
		return hideBookkeepingIn(objPtr)
	}
	return nil
}

func (s *scopedStorage) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	k, opts, sc, err := s.readRequest(ctx, key, opts)
	if err != nil {
		return err
	}
	if err := s.delegate.GetList(storageContext(ctx, sc), k, opts, listObj); err != nil {
		return err
	}
	if s.hidesBookkeeping(ctx) {
		return hideBookkeepingInList(listObj)
	}
	return nil
}

func (s *scopedStorage) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool, preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	sc, err := s.writeScope(ctx, "update")
	if err != nil {
		return err
	}
	k, err := scopedKey(s.resourcePrefix, sc, s.fromRegistry(key))
	if err != nil {
		return err
	}
	partitioned := func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		out, ttl, err := tryUpdate(input, res)
		if err != nil {
			return nil, nil, err
		}
		om, err := meta.Accessor(out)
		if err != nil {
			return nil, nil, err
		}
		if err := stampPartition(om, sc); err != nil {
			return nil, nil, err
		}
		// After upstream's validation, which refuses a lower generation
		// than the stored one: a copy's is the origin's.
		im, err := meta.Accessor(input)
		if err != nil {
			return nil, nil, err
		}
		RestoreOnUpdate(ctx, im, om)
		return out, ttl, nil
	}
	return s.delegate.GuaranteedUpdate(storageContext(ctx, sc), k, destination, ignoreNotFound, preconditions, partitioned, cachedExistingObject)
}

func (s *scopedStorage) Stats(ctx context.Context) (storage.Stats, error) {
	return s.delegate.Stats(unscopedStorageContext(ctx))
}

func (s *scopedStorage) ReadinessCheck() error { return s.delegate.ReadinessCheck() }

func (s *scopedStorage) RequestWatchProgress(ctx context.Context) error {
	return s.delegate.RequestWatchProgress(unscopedStorageContext(ctx))
}

func (s *scopedStorage) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	return s.delegate.GetCurrentResourceVersion(unscopedStorageContext(ctx))
}

func (s *scopedStorage) EnableResourceSizeEstimation(f storage.KeysFunc) error {
	return s.delegate.EnableResourceSizeEstimation(f)
}

func (s *scopedStorage) CompactRevision() int64 { return s.delegate.CompactRevision() }

// writeScope returns the concrete scope a write goes to, or a Status error.
// The HTTP layer refuses wildcard writes earlier; this is the backstop for
// any caller that reaches storage another way.
func (s *scopedStorage) writeScope(ctx context.Context, verb string) (kcpcache.Scope, error) {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		return kcpcache.Scope{}, apierrors.NewInternalError(fmt.Errorf("cannot %s %s without a cache scope in the request context", verb, s.groupResource))
	}
	if sc.IsWildcard() {
		return kcpcache.Scope{}, apierrors.NewMethodNotSupported(s.groupResource, verb)
	}
	return sc, nil
}

// readRequest maps a list or watch onto storage. A concrete scope is a key
// prefix. A wildcard scope becomes the broadest valid prefix ("s/*" keeps its
// shard; "*/c" and "*/*" read the whole resource) plus field terms for what a
// prefix cannot express: the cluster, the namespace, and the name of a
// single-object watch.
func (s *scopedStorage) readRequest(ctx context.Context, key string, opts storage.ListOptions) (string, storage.ListOptions, kcpcache.Scope, error) {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		sc = everything
	}
	if !sc.IsWildcard() {
		k, err := scopedKey(s.resourcePrefix, sc, s.fromRegistry(key))
		return k, opts, sc, err
	}
	rest, ok := kcpcache.CutPathPrefix(s.fromRegistry(key), s.resourcePrefix)
	if !ok {
		return "", opts, sc, fmt.Errorf("key %q is outside resource prefix %q", key, s.resourcePrefix)
	}

	terms := []fields.Selector{}
	if opts.Predicate.Field != nil && !opts.Predicate.Field.Empty() {
		terms = append(terms, opts.Predicate.Field)
	}
	shard := ""
	if sc.Shard != kcpcache.Wildcard {
		shard = sc.Shard
	}
	if sc.Cluster != kcpcache.Wildcard {
		terms = append(terms, fields.OneTermEqualSelector(FieldCluster, sc.Cluster))
		opts.Predicate.IndexFields = append(append([]string(nil), opts.Predicate.IndexFields...), FieldCluster)
	}
	if ns, _ := request.NamespaceFrom(ctx); ns != "" {
		terms = append(terms, fields.OneTermEqualSelector("metadata.namespace", ns))
	}
	if !opts.Recursive {
		rest = strings.TrimSuffix(rest, "/")
		if rest == "" {
			return "", opts, sc, apierrors.NewBadRequest("a single-object read needs a name")
		}
		terms = append(terms, fields.OneTermEqualSelector("metadata.name", path.Base(rest)))
		opts.Recursive = true
	}
	opts.Predicate.Field = fields.AndSelectors(terms...)
	if opts.Predicate.GetAttrs != nil {
		opts.Predicate.GetAttrs = withPartitionFields(opts.Predicate.GetAttrs)
	}
	return partitionPrefix(s.resourcePrefix, shard, ""), opts, sc, nil
}

// stampPartition sets the partition annotations from the scope, refusing an
// object that names another partition. It leaves a matching object untouched,
// because the object may be shared with the watch cache.
func stampPartition(m metav1.Object, sc kcpcache.Scope) error {
	matches, err := namesPartition(m, sc)
	if err != nil || matches {
		return err
	}
	a := m.GetAnnotations()
	want := [...][2]string{{kcpcache.AnnotationShard, sc.Shard}, {kcpcache.AnnotationCluster, sc.Cluster}}
	out := make(map[string]string, len(a)+2)
	for k, v := range a {
		out[k] = v
	}
	for _, kv := range want {
		out[kv[0]] = kv[1]
	}
	m.SetAnnotations(out)
	return nil
}

// StampAnswer sets the partition annotations of the write in ctx on a dry
// run's answer, which storage, where real writes get them, never sees.
func StampAnswer(ctx context.Context, obj runtime.Object) error {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok || sc.IsWildcard() {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	return stampPartition(m, sc)
}

// namesPartition says whether m carries both partition annotations of sc,
// refusing an object whose annotations name another partition.
func namesPartition(m metav1.Object, sc kcpcache.Scope) (bool, error) {
	a := m.GetAnnotations()
	matches := true
	for _, kv := range [...][2]string{{kcpcache.AnnotationShard, sc.Shard}, {kcpcache.AnnotationCluster, sc.Cluster}} {
		got, present := a[kv[0]]
		if present && got != kv[1] {
			return false, apierrors.NewBadRequest(fmt.Sprintf("annotation %s=%q does not match %q from the request path; the server sets it", kv[0], got, kv[1]))
		}
		matches = matches && present
	}
	return matches, nil
}

// CheckCreate refuses, before the registry prepares it, a created object
// whose partition annotations name another partition than the request's,
// with the same 400 as storage. kcp's fork needs it this early: its registry
// drops kcp.io/shard from a created object before storage sees it.
func CheckCreate(ctx context.Context, obj runtime.Object) error {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok || sc.IsWildcard() {
		return nil // storage refuses these
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	_, err = namesPartition(m, sc)
	return err
}

func isDeletion(ctx context.Context) bool {
	info, ok := request.RequestInfoFrom(ctx)
	return ok && (info.Verb == "delete" || info.Verb == "deletecollection")
}
