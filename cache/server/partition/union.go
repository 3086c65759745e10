package partition

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A union is the read-only storage of every member of a resource family:
// the resources whose key prefixes are "<resource prefix>:<member>" (kcp's
// identity resources, "<group>/<resource>:<identity>", one per identity).
// kcp's cache answers a read of the resource without an identity from all
// of them; under this layout they are sibling prefixes, which upstream's
// etcd storage cannot read as one (it lists and watches "<prefix>/" only).
//
// It reads etcd directly: one range for a list, so that a list has one
// resourceVersion, and one watch on the common stem for a watch, so that the
// events of every member arrive in one stream in revision order and a watch
// resumed from the last resourceVersion a client saw loses nothing. Merging
// one watch per member could not promise that: each member's stream runs
// ahead or behind the others. A new member (a new identity) is in the stem
// already, so running watches see its objects without a restart. There is
// no watch cache: every list reads etcd, as kcp's own cache does for
// everything.

// NewUnionDecorator returns the storage decorator of a resource family
// read through client: the registry Store that asks for it serves every
// member at once, read-only. Members' objects are stored in partitions
// (<member>/<shard>/<cluster>/[<namespace>/]<name> below the stem), which
// the request scope selects by key.
func NewUnionDecorator(client *clientv3.Client) generic.StorageDecorator {
	return asStorageDecorator(func(
		config *storagebackend.ConfigForResource,
		_, resourcePrefix string,
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		_ storage.AttrFunc,
		_ storage.IndexerFuncs,
		_ *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		if client == nil {
			return nil, nil, fmt.Errorf("no etcd client to read %s from", config.GroupResource)
		}
		u := &union{
			client:         client,
			codec:          config.Codec,
			transformer:    config.Transformer,
			newFunc:        newFunc,
			newListFunc:    newListFunc,
			groupResource:  config.GroupResource,
			resourcePrefix: "/" + strings.TrimPrefix(resourcePrefix, "/"),
			stem:           UnionStem(config.Prefix, resourcePrefix),
		}
		return withEtcdAnswers(u, config.GroupResource), func() {}, nil
	})
}

// UnionStem is the etcd key prefix every member of the family of
// resourcePrefix shares below the etcd prefix: the members' resource
// prefixes are resourcePrefix + ":" + member, stored as upstream's etcd
// storage joins prefixes (path.Join("/", etcdPrefix) + "/" + resource
// prefix without its leading slash).
func UnionStem(etcdPrefix, resourcePrefix string) string {
	p := path.Join("/", etcdPrefix)
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p + strings.TrimPrefix(resourcePrefix, "/") + ":"
}

type union struct {
	client        *clientv3.Client
	codec         runtime.Codec
	transformer   value.Transformer
	newFunc       func() runtime.Object
	newListFunc   func() runtime.Object
	groupResource schema.GroupResource
	// resourcePrefix is how the registry Store names the family in keys
	// ("/<prefix>[/<namespace>][/<name>]"); stem is the etcd key prefix
	// of every member.
	resourcePrefix, stem string
}

var _ storage.Interface = &union{}

var unionVersioner = storage.APIObjectVersioner{}

// unionPageSize bounds one etcd range response of a list.
const unionPageSize = 1000

func (u *union) Versioner() storage.Versioner { return unionVersioner }

func (u *union) Create(context.Context, string, runtime.Object, runtime.Object, uint64) error {
	return u.readOnly("create")
}

func (u *union) Delete(context.Context, string, runtime.Object, *storage.Preconditions, storage.ValidateObjectFunc, runtime.Object, storage.DeleteOptions) error {
	return u.readOnly("delete")
}

func (u *union) GuaranteedUpdate(context.Context, string, runtime.Object, bool, *storage.Preconditions, storage.UpdateFunc, runtime.Object) error {
	return u.readOnly("update")
}

func (u *union) readOnly(verb string) error {
	return apierrors.NewMethodNotSupported(u.groupResource, verb+" (write under the resource with its identity)")
}

// Get is not served here: a read by name tries the members' own storage,
// which knows which members exist (see the data plane).
func (u *union) Get(context.Context, string, storage.GetOptions, runtime.Object) error {
	return apierrors.NewInternalError(fmt.Errorf("%s is read by name through its members", u.groupResource))
}

// Stats counts the keys of every member: the data plane's LIST budget
// estimates a LIST by it.
func (u *union) Stats(ctx context.Context) (storage.Stats, error) {
	resp, err := u.client.Get(ctx, u.stem, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return storage.Stats{}, err
	}
	return storage.Stats{ObjectCount: resp.Count}, nil
}

func (u *union) ReadinessCheck() error { return nil }

func (u *union) RequestWatchProgress(context.Context) error { return nil }

func (u *union) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	resp, err := u.client.Get(ctx, u.stem, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return uint64(resp.Header.Revision), nil
}

func (u *union) EnableResourceSizeEstimation(storage.KeysFunc) error { return nil }

func (u *union) CompactRevision() int64 { return 0 }

// selection is what a request selects by key: the partition of its scope,
// a namespace, and one name for a single-object read.
type selection struct {
	shard, cluster  string // "" selects every one
	namespace, name string // "" selects every one
}

// memberKey is a stored object's place in the family.
type memberKey struct {
	member, shard, cluster, namespace, name string
}

// parseMemberKey splits an etcd key below the stem; ok is false for a key
// that is not an object's.
func (u *union) parseMemberKey(key string) (memberKey, bool) {
	rest, ok := strings.CutPrefix(key, u.stem)
	if !ok {
		return memberKey{}, false
	}
	parts := strings.Split(rest, "/")
	switch len(parts) {
	case 4:
		return memberKey{member: parts[0], shard: parts[1], cluster: parts[2], name: parts[3]}, true
	case 5:
		return memberKey{member: parts[0], shard: parts[1], cluster: parts[2], namespace: parts[3], name: parts[4]}, true
	}
	return memberKey{}, false
}

func (s selection) matches(k memberKey) bool {
	return (s.shard == "" || s.shard == k.shard) && (s.cluster == "" || s.cluster == k.cluster) &&
		(s.namespace == "" || s.namespace == k.namespace) && (s.name == "" || s.name == k.name)
}

// selectionOf reads the scope from ctx and the namespace and name from the
// key the registry Store built.
func (u *union) selectionOf(ctx context.Context, key string, recursive bool) (selection, error) {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		sc = everything
	}
	var sel selection
	if sc.Shard != kcpcache.Wildcard {
		sel.shard = sc.Shard
	}
	if sc.Cluster != kcpcache.Wildcard {
		sel.cluster = sc.Cluster
	}
	rest, ok := kcpcache.CutPathPrefix(key, u.resourcePrefix)
	if !ok {
		return sel, fmt.Errorf("key %q is outside resource prefix %q", key, u.resourcePrefix)
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		parts = nil
	}
	switch {
	case recursive && len(parts) == 0:
	case recursive && len(parts) == 1:
		sel.namespace = parts[0]
	case !recursive && len(parts) == 1:
		sel.name = parts[0]
	case !recursive && len(parts) == 2:
		sel.namespace, sel.name = parts[0], parts[1]
	default:
		return sel, fmt.Errorf("key %q does not name a list or an object of %s", key, u.groupResource)
	}
	return sel, nil
}

// decode reads one stored value, with the resourceVersion it has at rev.
func (u *union) decode(ctx context.Context, key, data []byte, rev int64) (runtime.Object, error) {
	if u.transformer != nil {
		var err error
		if data, _, err = u.transformer.TransformFromStorage(ctx, data, value.DefaultContext(key)); err != nil {
			return nil, storage.NewInternalError(fmt.Errorf("reading %s: %w", key, err))
		}
	}
	obj, _, err := u.codec.Decode(data, nil, u.newFunc())
	if err != nil {
		return nil, storage.NewInternalError(fmt.Errorf("decoding %s: %w", key, err))
	}
	if err := unionVersioner.UpdateObject(obj, uint64(rev)); err != nil {
		return nil, err
	}
	return obj, nil
}

// listRevision maps a list's resourceVersion to the etcd revision to read
// at (0: the latest) and the least revision the read must reach.
func listRevision(opts storage.ListOptions) (withRev, atLeast int64, err error) {
	if opts.ResourceVersion == "" {
		return 0, 0, nil
	}
	rv, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if err != nil || rv < 0 {
		return 0, 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", opts.ResourceVersion))
	}
	if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		if rv == 0 {
			return 0, 0, apierrors.NewBadRequest("resourceVersionMatch=Exact needs a resourceVersion above 0")
		}
		return rv, 0, nil
	}
	return 0, rv, nil
}

// GetList lists every member's objects the request selects, at one etcd
// revision. It answers the whole list at once: a limit is ignored (as the
// watch cache ignores it), and no continue token is ever handed out.
func (u *union) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if opts.Predicate.Continue != "" {
		return apierrors.NewResourceExpired(fmt.Sprintf("%s is listed in one piece; list again without the continue parameter", u.groupResource))
	}
	sel, err := u.selectionOf(ctx, key, opts.Recursive)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	withRev, atLeast, err := listRevision(opts)
	if err != nil {
		return err
	}
	var items []runtime.Object
	rev, err := u.scan(ctx, withRev, func(k memberKey, kv *keyValue) error {
		if !sel.matches(k) {
			return nil
		}
		obj, err := u.decode(ctx, kv.key, kv.value, kv.modRevision)
		if err != nil {
			return err
		}
		if ok, err := opts.Predicate.Matches(obj); err != nil || !ok {
			return err
		}
		items = append(items, obj)
		return nil
	})
	if err != nil {
		return err
	}
	if rev < atLeast {
		return storage.NewTooLargeResourceVersionError(uint64(atLeast), uint64(rev), 1)
	}
	if err := meta.SetList(listObj, items); err != nil {
		return err
	}
	return unionVersioner.UpdateList(listObj, uint64(rev), "", nil)
}

type keyValue struct {
	key, value  []byte
	modRevision int64
}

// scan visits every object of the family at revision withRev (0: the
// latest), in pages of one consistent revision, and returns that revision.
func (u *union) scan(ctx context.Context, withRev int64, visit func(memberKey, *keyValue) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(u.stem)
	from := u.stem
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(unionPageSize)}
		if withRev > 0 {
			opts = append(opts, clientv3.WithRev(withRev))
		}
		resp, err := u.client.Get(ctx, from, opts...)
		if err != nil {
			return 0, interpretEtcdError(err, "list")
		}
		if withRev == 0 {
			// Every further page reads the revision of the first.
			withRev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			k, ok := u.parseMemberKey(string(kv.Key))
			if !ok {
				continue
			}
			if err := visit(k, &keyValue{key: kv.Key, value: kv.Value, modRevision: kv.ModRevision}); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return withRev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// interpretEtcdError turns etcd's "compacted" into the 410 clients relist
// on, and anything else into an internal error (which etcdAnswers answers
// 503 when it means "try again").
func interpretEtcdError(err error, what string) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		return apierrors.NewResourceExpired(fmt.Sprintf("The resourceVersion for the provided %s is too old.", what))
	}
	if apierrors.IsResourceExpired(err) || apierrors.IsInternalError(err) {
		return err
	}
	return storage.NewInternalError(err)
}

// Watch follows every member's objects the request selects, from one etcd
// watch on the stem: events in revision order, whichever member they are
// of.
func (u *union) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	sel, err := u.selectionOf(ctx, key, opts.Recursive)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var from int64
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if opts.ResourceVersion != "" {
		if from, err = strconv.ParseInt(opts.ResourceVersion, 10, 64); err != nil || from < 0 {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", opts.ResourceVersion))
		}
	}
	// Without a resourceVersion (or with 0) a watch starts with the current
	// state, as upstream's etcd watch does; so does a watch that asks for
	// initial events.
	initial = initial || from == 0
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &unionWatch{
		union:  u,
		sel:    sel,
		pred:   opts.Predicate,
		result: make(chan watch.Event, 100),
		cancel: cancel,
	}
	w.wg.Add(1)
	go w.run(wctx, from, initial, opts)
	return w, nil
}

type unionWatch struct {
	*union
	sel    selection
	pred   storage.SelectionPredicate
	result chan watch.Event
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *unionWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch and waits for its goroutine, which closes the result
// channel.
func (w *unionWatch) Stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *unionWatch) run(ctx context.Context, from int64, initial bool, opts storage.ListOptions) {
	defer w.wg.Done()
	defer close(w.result)
	if initial {
		rev, err := w.sendInitial(ctx, from)
		if err != nil {
			w.sendError(ctx, err)
			return
		}
		from = rev
		if opts.Predicate.AllowWatchBookmarks && opts.SendInitialEvents != nil && *opts.SendInitialEvents {
			if !w.sendBookmark(ctx, rev, true) {
				return
			}
		}
	}
	wopts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(from + 1), clientv3.WithPrevKV()}
	if opts.Predicate.AllowWatchBookmarks {
		wopts = append(wopts, clientv3.WithProgressNotify())
	}
	for resp := range w.client.Watch(ctx, w.stem, wopts...) {
		if err := resp.Err(); err != nil {
			w.sendError(ctx, interpretEtcdError(err, "watch"))
			return
		}
		if resp.IsProgressNotify() {
			if opts.Predicate.AllowWatchBookmarks && !w.sendBookmark(ctx, resp.Header.Revision, false) {
				return
			}
			continue
		}
		for _, ev := range resp.Events {
			e, err := w.event(ctx, ev)
			if err != nil {
				w.sendError(ctx, err)
				return
			}
			if e != nil && !w.send(ctx, *e) {
				return
			}
		}
	}
	if ctx.Err() == nil {
		// The etcd client closed the watch (its connection is gone): end
		// with an error the client relists on, not silently.
		w.sendError(ctx, apierrors.NewInternalError(fmt.Errorf("the etcd watch of %s ended", w.groupResource)))
	}
}

// sendInitial sends the current state (at least revision atLeast) as ADDED
// events and returns its revision.
func (w *unionWatch) sendInitial(ctx context.Context, atLeast int64) (int64, error) {
	var events []watch.Event
	rev, err := w.scan(ctx, 0, func(k memberKey, kv *keyValue) error {
		if !w.sel.matches(k) {
			return nil
		}
		obj, err := w.decode(ctx, kv.key, kv.value, kv.modRevision)
		if err != nil {
			return err
		}
		if ok, err := w.pred.Matches(obj); err != nil || !ok {
			return err
		}
		events = append(events, watch.Event{Type: watch.Added, Object: obj})
		return nil
	})
	if err != nil {
		return 0, err
	}
	if rev < atLeast {
		return 0, storage.NewTooLargeResourceVersionError(uint64(atLeast), uint64(rev), 1)
	}
	for _, e := range events {
		if !w.send(ctx, e) {
			return 0, ctx.Err()
		}
	}
	return rev, nil
}

// event turns one etcd event into the watch event the predicate sees: an
// object that starts or stops matching is ADDED or DELETED, as upstream's
// etcd watch reports it. nil means the event is not selected.
func (w *unionWatch) event(ctx context.Context, ev *clientv3.Event) (*watch.Event, error) {
	k, ok := w.parseMemberKey(string(ev.Kv.Key))
	if !ok || !w.sel.matches(k) {
		return nil, nil
	}
	rev := ev.Kv.ModRevision
	if ev.Type == clientv3.EventTypeDelete && ev.PrevKv == nil {
		// Without the deleted object nothing can be reported; ending the
		// watch makes the client relist rather than keep it.
		return nil, storage.NewInternalError(fmt.Errorf("etcd reported the deletion of %s at revision %d without the deleted object", ev.Kv.Key, rev))
	}
	var prev runtime.Object
	prevMatches := false
	// The previous object decides only deletions and, with a selector,
	// whether an update enters or leaves it.
	if ev.PrevKv != nil && (ev.Type == clientv3.EventTypeDelete || !w.pred.Empty()) {
		var err error
		if prev, err = w.decode(ctx, ev.PrevKv.Key, ev.PrevKv.Value, rev); err != nil {
			return nil, err
		}
		if prevMatches, err = w.pred.Matches(prev); err != nil {
			return nil, err
		}
	}
	if ev.Type == clientv3.EventTypeDelete {
		if !prevMatches {
			return nil, nil
		}
		return &watch.Event{Type: watch.Deleted, Object: prev}, nil
	}
	cur, err := w.decode(ctx, ev.Kv.Key, ev.Kv.Value, rev)
	if err != nil {
		return nil, err
	}
	curMatches, err := w.pred.Matches(cur)
	if err != nil {
		return nil, err
	}
	switch {
	case curMatches && (ev.IsCreate() || (prev != nil && !prevMatches)):
		return &watch.Event{Type: watch.Added, Object: cur}, nil
	case curMatches:
		return &watch.Event{Type: watch.Modified, Object: cur}, nil
	case prevMatches:
		return &watch.Event{Type: watch.Deleted, Object: prev}, nil
	}
	return nil, nil
}

func (w *unionWatch) sendBookmark(ctx context.Context, rev int64, initialEventsEnd bool) bool {
	obj := w.newFunc()
	if err := unionVersioner.UpdateObject(obj, uint64(rev)); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot set a bookmark's resourceVersion", "resource", w.groupResource)
		return true
	}
	if initialEventsEnd {
		if err := storage.AnnotateInitialEventsEndBookmark(obj); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot annotate the initial events' end", "resource", w.groupResource)
			return true
		}
	}
	return w.send(ctx, watch.Event{Type: watch.Bookmark, Object: obj})
}

func (w *unionWatch) send(ctx context.Context, e watch.Event) bool {
	select {
	case w.result <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendError ends the watch with err as a Status, unless the watch was
// stopped.
func (w *unionWatch) sendError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	w.send(ctx, watch.Event{Type: watch.Error, Object: &s})
}
