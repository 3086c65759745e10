package partition

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// Objects in etcd without a partition (no kcp.io/shard or no kcp.io/cluster
// annotation) cannot be keyed by the watch cache, and one of them would
// fail the whole type: the cache would never fill, and the server never
// become ready. None is written through the server, which stamps both on
// every write; they come from outside: keys a move from kcp's cache-server
// left because it could not read them (kcplayout counts and logs them), or
// writes to etcd by hand. The watch cache's source leaves them out of its
// lists and watch events, which are also the reads the cache delegates to
// etcd, and says so the first time for each type.

// unpartitioned counts what a type's source left out.
type unpartitioned struct {
	resource string
	logged   atomic.Bool
}

func hasPartition(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	shard, cluster := partitionAnnotations(obj, m)
	return shard != "" && cluster != ""
}

// filterList removes the objects without a partition from listObj.
func (u *unpartitioned) filterList(listObj runtime.Object) error {
	any := false
	if err := meta.EachListItem(listObj, func(obj runtime.Object) error {
		any = any || !hasPartition(obj)
		return nil
	}); err != nil || !any {
		return err
	}
	items, err := meta.ExtractList(listObj)
	if err != nil {
		return err
	}
	kept := items[:0]
	var dropped []string
	for _, obj := range items {
		if hasPartition(obj) {
			kept = append(kept, obj)
			continue
		}
		if m, err := meta.Accessor(obj); err == nil {
			dropped = append(dropped, m.GetNamespace()+"/"+m.GetName())
		}
	}
	u.log(dropped)
	return meta.SetList(listObj, kept)
}

// filterWatch leaves the events of objects without a partition out of w.
func (u *unpartitioned) filterWatch(w watch.Interface) watch.Interface {
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if !hasPartition(e.Object) {
				if m, err := meta.Accessor(e.Object); err == nil {
					u.log([]string{m.GetNamespace() + "/" + m.GetName()})
				}
				return e, false
			}
		}
		return e, true
	})
}

func (u *unpartitioned) log(objects []string) {
	if len(objects) == 0 {
		return
	}
	logger := klog.Background().WithName("partition")
	if u.logged.CompareAndSwap(false, true) {
		logger.Info("Objects in etcd without the kcp.io/shard and kcp.io/cluster annotations are not served", "resource", u.resource, "count", len(objects), "objects", objects)
		return
	}
	logger.V(4).Info("Objects in etcd without the kcp.io/shard and kcp.io/cluster annotations are not served", "resource", u.resource, "count", len(objects), "objects", objects)
}
