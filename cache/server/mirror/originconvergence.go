package mirror

import (
	"context"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// A shard without heartbeats (kcp's own replication controller writes
// none) never says that it converged at a restored home. Its copies carry
// what the shard's objects were when it pushed them: the origin's UID and
// resourceVersion (kcpcache.AnnotationOriginalResourceUID and
// AnnotationOriginalResourceVersion), revisions of the shard's own etcd,
// which only grow. So the partition is whole again at the home when, for
// every copy held here (the shard's objects as this mirror had them when
// the home was restored), the home holds the same object at least as new
// (same origin UID and an origin resourceVersion not lower; or an object
// created later), and the home holds nothing the held copies say was
// deleted before (an object of that shard whose origin resourceVersion is
// not above the newest held one, yet absent here). The hold is released
// as soon as that holds.
//
// A held copy the home does not hold may be an object the shard deleted
// since (it will never come back) or one the shard has not pushed again
// yet; the mirror cannot tell which, and dropping a copy of an object the
// shard still has would report a present object absent. Such a partition
// stays held until the shard's heartbeat says it converged or
// restoredHoldTimeout passes.
//
// Bound: a heartbeat-less shard that deleted nothing while its home was
// being restored is released at the first check (releaseCheckInterval)
// after its last push at the home.

// origin is what a copy says of its origin object.
type origin struct {
	uid     string
	rv      int64
	created time.Time
}

func originOf(u *unstructured.Unstructured) (origin, bool) {
	a := u.GetAnnotations()
	rv, err := strconv.ParseInt(a[kcpcache.AnnotationOriginalResourceVersion], 10, 64)
	if err != nil {
		return origin{}, false
	}
	uid := a[kcpcache.AnnotationOriginalResourceUID]
	if uid == "" {
		uid = string(u.GetUID())
	}
	return origin{uid: uid, rv: rv, created: u.GetCreationTimestamp().Time}, true
}

func objectKey(u *unstructured.Unstructured) string {
	return u.GetAnnotations()[kcpcache.AnnotationCluster] + "/" + u.GetNamespace() + "/" + u.GetName()
}

// wholeAtHome compares the copies of shard held here with what the peer
// (the restored home, or a relay of it) holds now, for every type mirrored
// from it; it returns whether the partition is whole again there, and why
// not.
func (p *source) wholeAtHome(ctx context.Context, local *client.ClusterClient, shard, homeName string) (bool, string, error) {
	p.mu.Lock()
	var types []schema.GroupVersionResource
	for _, s := range p.streams {
		types = append(types, s.gvr)
	}
	p.mu.Unlock()
	var missing int
	var newestHeld int64
	held := map[string]origin{}
	home := map[string]origin{}
	for _, gvr := range types {
		// The held copies, from this cache's watch cache: a consistent read
		// of a held partition is refused (ReasonHomeRestored).
		copies, err := local.Cluster(shard, kcpcache.Wildcard).Resource(gvr).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, "", err
		}
		for i := range copies.Items {
			c := &copies.Items[i]
			if c.GetAnnotations()[kcpcache.AnnotationHome] != homeName {
				continue
			}
			o, ok := originOf(c)
			if !ok {
				return false, fmt.Sprintf("the copy %s of %s does not say what its origin was (no %s)", objectKey(c), gvr.Resource, kcpcache.AnnotationOriginalResourceVersion), nil
			}
			held[gvr.Resource+"/"+objectKey(c)] = o
			newestHeld = max(newestHeld, o.rv)
		}
		objects, err := p.Client().Cluster(shard, kcpcache.Wildcard).Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		for i := range objects.Items {
			h := &objects.Items[i]
			o, ok := originOf(h)
			if !ok {
				continue
			}
			home[gvr.Resource+"/"+objectKey(h)] = o
		}
	}
	for key, h := range home {
		c, ok := held[key]
		switch {
		case !ok && h.rv <= newestHeld:
			return false, fmt.Sprintf("the home holds %s, which the shard deleted before the home was restored", key), nil
		case !ok:
			// Created after the held copies: newer.
		case h.uid == c.uid && h.rv < c.rv:
			return false, fmt.Sprintf("the home holds %s at origin resourceVersion %d, older than the %d held here", key, h.rv, c.rv), nil
		case h.uid != c.uid && h.created.Before(c.created):
			return false, fmt.Sprintf("the home holds an older object %s (created %s) than the one held here", key, h.created), nil
		}
	}
	for key := range held {
		if _, ok := home[key]; !ok {
			missing++
		}
	}
	if missing == 0 {
		return true, "", nil
	}
	return false, fmt.Sprintf("%d objects held here are not at the home (deleted at the shard, or not pushed again yet)", missing), nil
}
