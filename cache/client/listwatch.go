package client

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// observedListerWatcher wraps the ListerWatcher of an informer. It records
// list and watch outcomes in a freshness, and it declares watch-list
// semantics unsupported.
//
// The declaration matters: client-go v0.37 enables the WatchListClient
// feature by default, and its reflector then opens a watch with
// sendInitialEvents=true instead of listing, unless
// watchlist.DoesClientNotSupportWatchListSemantics reports the ListerWatcher
// it was built with as unsupported. A kcp-cache server refuses such watches on
// wildcard scopes, and the reflector's watch-list buffer keys objects by
// namespace/name, so same-named copies from different clusters would collapse.
// With the declaration the reflector lists and then watches.
//
// It also keeps the informer within one cache epoch (kcpcache.EpochHeader):
// resourceVersions of two epochs are not comparable (a new etcd counts from
// 1 again; a restored one from an older revision), so resuming a watch from
// a resourceVersion of the old epoch would wait for a revision that means
// something else, or skip what happened in between. A watch whose response
// announces another epoch than the informer's last list is refused as
// expired, which makes the reflector list again, and that list asks for the
// newest data instead of "not older than" the old resourceVersion.
type observedListerWatcher struct {
	delegate  cache.ListerWatcherWithContext
	freshness *freshness
	// epochs is the client's epoch record; nil when the informer's client
	// tracks none.
	epochs *Epochs

	mu sync.Mutex
	// listEpoch is the epoch of the last complete list, when listed is set.
	listEpoch string
	listed    bool
}

var (
	_ cache.ListerWatcher            = &observedListerWatcher{}
	_ cache.ListerWatcherWithContext = &observedListerWatcher{}
)

func newObservedListerWatcher(lw cache.ListerWatcher, f *freshness) *observedListerWatcher {
	return &observedListerWatcher{delegate: cache.ToListerWatcherWithContext(lw), freshness: f}
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// watch rather than stream the initial list.
func (lw *observedListerWatcher) IsWatchListSemanticsUnSupported() bool { return true }

// List implements cache.Lister.
func (lw *observedListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// ListWithContext implements cache.ListerWithContext. Only the last page of a
// paginated list counts as a sync: earlier pages leave the store incomplete.
func (lw *observedListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	var holder *epochHolder
	if lw.epochs != nil {
		if listEpoch, listed := lw.lastListEpoch(); listed && options.ResourceVersion != "" && options.Continue == "" {
			if current, seen := lw.epochs.Current(); seen && current != listEpoch {
				// The old resourceVersion means nothing in the new epoch.
				options.ResourceVersion, options.ResourceVersionMatch = "", ""
			}
		}
		ctx, holder = withEpochHolder(ctx)
	}
	obj, err := lw.delegate.ListWithContext(ctx, options)
	if err != nil {
		return obj, err
	}
	if l, lerr := meta.ListAccessor(obj); lerr != nil || l.GetContinue() == "" {
		lw.freshness.listed()
		if holder != nil {
			epoch, _ := holder.get()
			lw.mu.Lock()
			lw.listEpoch, lw.listed = epoch, true
			lw.mu.Unlock()
		}
	}
	return obj, nil
}

// lastListEpoch returns the epoch of the last complete list.
func (lw *observedListerWatcher) lastListEpoch() (string, bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.listEpoch, lw.listed
}

// Watch implements cache.Watcher.
func (lw *observedListerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// WatchWithContext implements cache.WatcherWithContext. The watch counts as
// established until it is stopped; the reflector stops every watch it is done
// with, including one the server closed.
func (lw *observedListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	var holder *epochHolder
	if lw.epochs != nil {
		ctx, holder = withEpochHolder(ctx)
	}
	w, err := lw.delegate.WatchWithContext(ctx, options)
	if err != nil {
		return w, err
	}
	if holder != nil {
		listEpoch, listed := lw.lastListEpoch()
		if epoch, known := holder.get(); known && listed && epoch != listEpoch {
			w.Stop()
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("the cache's epoch changed from %q to %q: resourceVersion %s belongs to the old one; listing again", listEpoch, epoch, options.ResourceVersion))
		}
	}
	return &observedWatch{Interface: w, closed: lw.freshness.watchOpened()}, nil
}

// observedWatch reports its Stop to freshness.
type observedWatch struct {
	watch.Interface
	closed func()
}

// Stop implements watch.Interface.
func (w *observedWatch) Stop() {
	w.Interface.Stop()
	w.closed()
}
