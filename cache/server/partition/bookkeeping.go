package partition

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
)

// A mirror keeps what it must know of a copy (its home, the home's epoch and
// resourceVersion: kcpcache.CopyBookkeeping) as annotations of the copy, and
// peers read them there. Every other reader is served the copy as its home
// serves the object (kcpcache.HidesCopyBookkeeping, set by the hierarchy
// filter): kcp hands what it reads from the cache to its own users, and
// compares, hashes and applies those objects across regions. Heartbeats
// are this project's own type and keep them: a reader of a mirrored
// heartbeat learns its home and epoch there (client.PartitionFreshness).

// hidesBookkeeping reports whether a read in ctx is answered without the
// copies' bookkeeping.
func (s *scopedStorage) hidesBookkeeping(ctx context.Context) bool {
	return kcpcache.HidesCopyBookkeeping(ctx) && s.groupResource != kcpcache.HeartbeatResource.GroupResource()
}

// withoutBookkeeping returns obj without the copy bookkeeping: obj itself
// when it has none, else a copy (obj may be shared with the watch cache).
func withoutBookkeeping(obj runtime.Object) (runtime.Object, error) {
	if o, ok := obj.(*opaque.Object); ok {
		c, _ := o.WithoutAnnotations(kcpcache.CopyBookkeeping)
		return c, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	a := m.GetAnnotations()
	kept := make(map[string]string, len(a))
	for k, v := range a {
		kept[k] = v
	}
	for _, k := range kcpcache.CopyBookkeeping {
		delete(kept, k)
	}
	if len(kept) == len(a) {
		return obj, nil
	}
	c := obj.DeepCopyObject()
	cm, err := meta.Accessor(c)
	if err != nil {
		return nil, err
	}
	if len(kept) == 0 {
		kept = nil
	}
	cm.SetAnnotations(kept)
	return c, nil
}

// hideBookkeepingIn removes the copy bookkeeping from the object objPtr
// points to, in place: what it holds may share its metadata with the watch
// cache, which is never written, so the object is replaced by a copy.
func hideBookkeepingIn(objPtr runtime.Object) error {
	out, err := withoutBookkeeping(objPtr)
	if err != nil || out == objPtr {
		return err
	}
	dst, src := reflect.ValueOf(objPtr), reflect.ValueOf(out)
	if dst.Kind() != reflect.Pointer || src.Type() != dst.Type() {
		return fmt.Errorf("cannot replace a %T with a %T", objPtr, out)
	}
	dst.Elem().Set(src.Elem())
	return nil
}

// hideBookkeepingInList removes the copy bookkeeping from every item of
// listObj, in place.
func hideBookkeepingInList(listObj runtime.Object) error {
	if l, ok := listObj.(*opaque.ObjectList); ok {
		for i := range l.Items {
			if c, dropped := l.Items[i].WithoutAnnotations(kcpcache.CopyBookkeeping); dropped {
				l.Items[i] = *c
			}
		}
		return nil
	}
	items, err := meta.ExtractList(listObj)
	if err != nil {
		return err
	}
	for i, item := range items {
		if items[i], err = withoutBookkeeping(item); err != nil {
			return fmt.Errorf("list item %d: %w", i, err)
		}
	}
	return meta.SetList(listObj, items)
}

// watchWithoutBookkeeping serves w's events without the copy bookkeeping.
func watchWithoutBookkeeping(w watch.Interface) watch.Interface {
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if obj, err := withoutBookkeeping(ev.Object); err == nil {
				ev.Object = obj
			}
		}
		return ev, true
	})
}
