package integration_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
)

// kcpPushedCopy is an object as kcp's replication controller pushes it: with
// the origin's UID and resourceVersion, and no heartbeat anywhere.
func kcpPushedCopy(name string, originRV int64) *unstructured.Unstructured {
	u := apiExport(name, map[string]interface{}{"v": strconv.FormatInt(originRV, 10)})
	u.SetAnnotations(map[string]string{
		kcpcache.AnnotationOriginalResourceUID:     "origin-" + name,
		kcpcache.AnnotationOriginalResourceVersion: strconv.FormatInt(originRV, 10),
	})
	return u
}

// A home restored from a backup holds its mirrors' copies of a shard that
// writes no heartbeat (kcp's own replication) until the shard has pushed
// again what the backup lacks; then, by the origins the copies record, the
// mirror sees the partition whole at the home and follows it again, well
// within the hold's timeout of ten minutes.
func TestRegionsRestoredHomeReleasesAShardWithoutHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (two caches in regions, a home restored from a backup): skipped with -short")
	}
	ctx := testContext(t)
	regions := startRegions(t, ctx, "a", "c")
	a, c := regions["a"], regions["c"]
	if _, err := c.shard(t, "s-c").Create(ctx, kcpPushedCopy("one", 10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := func(r *region, rv string) ([]string, error) {
		list, err := dyn(t, r.srv, "s-c", kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, err
		}
		return sortedCopy(partitionsOf(list.Items)), nil
	}
	expect := func(what string, want ...string) {
		t.Helper()
		cachetest.Eventually(t, what, func(ctx context.Context) error {
			got, err := names(a, "")
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("a reads %v, want %v", got, want)
			}
			return nil
		})
	}
	expect("a mirrors one", "s-c/root/one")

	// A backup of c's etcd, then a write the backup lacks.
	c.stop(t)
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(c.opts.EtcdDirectory)); err != nil {
		t.Fatal(err)
	}
	c.start(t, ctx)
	if _, err := c.shard(t, "s-c").Create(ctx, kcpPushedCopy("later", 20), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("a mirrors later", "s-c/root/later", "s-c/root/one")

	// c restored from the backup: a new epoch, without "later".
	c.stop(t)
	if err := os.RemoveAll(c.opts.EtcdDirectory); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(c.opts.EtcdDirectory, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	c.start(t, ctx)
	cachetest.Eventually(t, "a holds s-c's copies ("+mirror.ReasonHomeRestored+")", func(ctx context.Context) error {
		if _, err := names(a, ""); !apierrors.IsServiceUnavailable(err) {
			return fmt.Errorf("got %v, want 503 %s", err, mirror.ReasonHomeRestored)
		}
		return nil
	})
	if got, err := names(a, "0"); err != nil || !slices.Equal(got, []string{"s-c/root/later", "s-c/root/one"}) {
		t.Fatalf("a's stale read while held: %v, %v; want later and one", got, err)
	}

	// The shard pushes again what the restored home lacks, as kcp's
	// controller does when it compares its objects with the cache.
	if _, err := c.shard(t, "s-c").Create(ctx, kcpPushedCopy("later", 20), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	expect("a follows c again once s-c's partition is whole there", "s-c/root/later", "s-c/root/one")
	t.Logf("the hold of a shard without heartbeats ended %s after its last push at the restored home", time.Since(pushed).Round(100*time.Millisecond))
}
