package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

var (
	heartbeatNames = bootstrap.CRDNames{Group: kcpcache.HeartbeatResource.Group, Version: kcpcache.HeartbeatResource.Version, Resource: kcpcache.HeartbeatResource.Resource, Kind: kcpcache.HeartbeatKind}
	shardNames     = bootstrap.CRDNames{Group: "core.kcp.io", Version: "v1alpha1", Resource: "shards", Kind: "Shard"}
)

// withRemoval makes the removal loops quick for a test.
func withRemoval(shardRetention, typeRetention time.Duration) cachetest.Option {
	return cachetest.WithFlags(func(o *options.Options) {
		o.Removal.ShardRetention, o.Removal.TypeRetention = shardRetention, typeRetention
		o.Removal.CheckInterval = 100 * time.Millisecond
	})
}

// putHeartbeat writes shard's heartbeat as the shard's hook does, renewed at
// renew for lease.
func putHeartbeat(t *testing.T, srv *cachetest.Server, shard string, renew time.Time, lease time.Duration) {
	t.Helper()
	obj := newObject(kcpcache.HeartbeatResource, kcpcache.HeartbeatKind, "", shard, map[string]interface{}{
		"renewTime":            metav1.NewMicroTime(renew).Format(metav1.RFC3339Micro),
		"leaseDurationSeconds": int64(lease / time.Second),
	})
	hb := dyn(t, srv, shard, kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource)
	_, err := hb.Create(context.Background(), obj, metav1.CreateOptions{})
	if apierrors.IsBadRequest(err) {
		// A server that does not accept the reserved heartbeat cluster in
		// its paths yet (the heartbeat is served by another part of the
		// server): store the object as the API would, partition
		// annotations included, at its key.
		obj.SetAnnotations(map[string]string{kcpcache.AnnotationShard: shard, kcpcache.AnnotationCluster: kcpcache.HeartbeatCluster})
		obj.SetUID(types.UID(shard + "-heartbeat"))
		data, merr := obj.MarshalJSON()
		if merr != nil {
			t.Fatal(merr)
		}
		key := fmt.Sprintf("%s/%s/%s/%s/%s/%s", srv.EtcdPrefix(), kcpcache.HeartbeatResource.Group, kcpcache.HeartbeatResource.Resource, shard, kcpcache.HeartbeatCluster, shard)
		_, err = srv.EtcdClient().Put(context.Background(), key, string(data))
	}
	if err != nil {
		t.Fatalf("heartbeat of %s: %v", shard, err)
	}
}

// fillPartition creates, in shard's partition, APIExports in two clusters
// and a widget, and returns how many objects it created.
func fillPartition(t *testing.T, srv *cachetest.Server, shard string, widgets schema.GroupVersionResource) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for _, cluster := range []string{"root", "2x9j3n5h"} {
		for i := range 3 {
			if _, err := dyn(t, srv, shard, cluster).Resource(apiExports).Create(ctx, apiExport(fmt.Sprintf("export-%d", i), nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	w := newObject(widgets, "Widget", "default", "w", nil)
	if _, err := dyn(t, srv, shard, "root").Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n + 1
}

// partitionKeys counts shard's keys in etcd, over every type the test uses.
func partitionKeys(t *testing.T, srv *cachetest.Server, shard string) int {
	t.Helper()
	n := 0
	for _, gr := range []string{"/apis.kcp.io/apiexports/", "/example.dev/widgets/", "/cache.kcp.io/shardheartbeats/"} {
		n += len(srv.EtcdKeys(t, gr+shard+"/"))
	}
	return n
}

// A shard whose heartbeat stays expired for longer than the retention loses
// its whole partition, every type and cluster, and not before; a shard
// with a fresh heartbeat and a shard without any keep theirs.
func TestExpiredShardPartitionIsPurgedAfterRetention(t *testing.T) {
	t.Parallel()
	const retention, lease = 3 * time.Second, time.Second
	srv := cachetest.StartServer(t, withRemoval(retention, 0))
	srv.InstallCRD(t, heartbeatNames)
	widgets := srv.InstallCRD(t, cachetest.WidgetNames)

	for _, shard := range []string{"gone", "fresh", "plain"} {
		fillPartition(t, srv, shard, widgets)
	}
	putHeartbeat(t, srv, "fresh", time.Now(), time.Hour)
	renewed := time.Now()
	putHeartbeat(t, srv, "gone", renewed, lease)
	before := metricSum(t, srv, "kcp_cache_removal_partition_purges_total", `reason="heartbeat_expired"`, `result="purged"`)

	cachetest.Eventually(t, "the expired shard's partition purged", func(context.Context) error {
		if n := partitionKeys(t, srv, "gone"); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	if purgedAt, earliest := time.Now(), renewed.Add(lease+retention); purgedAt.Before(earliest) {
		t.Errorf("purged at %s, before the heartbeat had been expired for the retention (%s)", purgedAt.Format(time.StampMilli), earliest.Format(time.StampMilli))
	}
	// The API agrees: the purged objects are gone from the watch cache too.
	cachetest.Eventually(t, "the purge seen through the API", func(ctx context.Context) error {
		list, err := dyn(t, srv, "gone", kcpcache.Wildcard).Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 0 {
			return fmt.Errorf("%v objects listed (err %v)", len(list.Items), err)
		}
		return nil
	})
	for _, shard := range []string{"fresh", "plain"} {
		want := 8
		if shard == "plain" {
			want = 7
		}
		if n := partitionKeys(t, srv, shard); n != want {
			t.Errorf("shard %s has %d keys, want %d: a shard with a fresh heartbeat or none is never purged by expiry", shard, n, want)
		}
	}
	if got := metricSum(t, srv, "kcp_cache_removal_partition_purges_total", `reason="heartbeat_expired"`, `result="purged"`); got <= before {
		t.Errorf("kcp_cache_removal_partition_purges_total{heartbeat_expired,purged} = %v, want more than %v", got, before)
	}

	// A shard that comes back simply pushes again.
	fillPartition(t, srv, "gone", widgets)
	putHeartbeat(t, srv, "gone", time.Now(), time.Hour)
	if n := partitionKeys(t, srv, "gone"); n != 8 {
		t.Errorf("the returning shard has %d keys, want 8", n)
	}
}

// Deleting a shard's core.kcp.io Shard object (in the root shard's
// partition, cluster root) purges that shard's partition at once, unless
// its heartbeat is fresh.
func TestDeletedShardObjectPurgesPartition(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t, withRemoval(time.Hour, 0))
	srv.InstallCRD(t, heartbeatNames)
	shards := srv.InstallCRD(t, shardNames)
	widgets := srv.InstallCRD(t, cachetest.WidgetNames)
	ctx := context.Background()
	rootShards := dyn(t, srv, "root", "root").Resource(shards)
	for _, shard := range []string{"beta", "gamma", "delta"} {
		fillPartition(t, srv, shard, widgets)
		if _, err := rootShards.Create(ctx, newObject(shards, "Shard", "", shard, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	putHeartbeat(t, srv, "gamma", time.Now(), time.Hour)

	// gamma first: its deletion is decided before beta's purge is visible.
	for _, shard := range []string{"gamma", "beta"} {
		if err := rootShards.Delete(ctx, shard, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cachetest.Eventually(t, "the deleted shard's partition purged", func(context.Context) error {
		if n := partitionKeys(t, srv, "beta"); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	if n := partitionKeys(t, srv, "gamma"); n != 8 {
		t.Errorf("gamma, deleted but with a fresh heartbeat, has %d keys, want 8", n)
	}
	if n := partitionKeys(t, srv, "delta"); n != 7 {
		t.Errorf("delta, not deleted, has %d keys, want 7", n)
	}
	if keys := srv.EtcdKeys(t, "/core.kcp.io/shards/root/root/"); len(keys) != 1 {
		t.Errorf("Shard objects left in root: %v, want only delta's", keys)
	}
}

// A CRD created at runtime that holds no objects for the type retention is
// deleted; one with objects stays, and so do the bootstrapped types, even
// empty.
func TestUnusedRuntimeTypeIsRemoved(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t, withRemoval(0, 2*time.Second))
	used := srv.InstallCRD(t, cachetest.WidgetNames)
	if _, err := dyn(t, srv, "amber", "root").Resource(used).Namespace("default").Create(context.Background(), newObject(used, "Widget", "default", "w", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unused := srv.InstallCRD(t, bootstrap.CRDNames{Group: "example.dev", Version: "v1", Resource: "gizmos", Kind: "Gizmo"})
	crds, err := apiextensionsclient.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	// The removal waits on upstream's CRD finalizer (5 s polls), slow when
	// the suite's parallel tests share two cores.
	cachetest.EventuallyWithin(t, "the unused type removed", 3*time.Minute, func(ctx context.Context) error {
		_, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, unused.GroupResource().String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("CRD still there (err %v)", err)
	})
	for _, name := range []string{used.GroupResource().String(), apiExports.GroupResource().String(), apiResourceSchema.GroupResource().String()} {
		if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s: %v; a used or bootstrapped type must stay", name, err)
		}
	}
	if got := metricSum(t, srv, "kcp_cache_removal_removed_types_total"); got < 1 {
		t.Errorf("kcp_cache_removal_removed_types_total = %v, want at least 1", got)
	}
}
