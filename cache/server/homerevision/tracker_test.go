package homerevision_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homerevision"
)

const prefix = homerevision.KeyPrefix

var (
	exports    = schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}
	configmaps = schema.GroupResource{Resource: "configmaps"}
)

// runTracker runs a tracker until the test ends.
func runTracker(t *testing.T, c *clientv3.Client) *homerevision.Tracker {
	t.Helper()
	return startTracker(t, homerevision.NewTracker(c, prefix))
}

// startTracker runs tr until the test ends.
func startTracker(t *testing.T, tr *homerevision.Tracker) *homerevision.Tracker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tr
}

// objectKey is where shard's object of gr is stored.
func objectKey(gr schema.GroupResource, shard, cluster, name string) string {
	return prefix + "/" + gr.Group + "/" + gr.Resource + "/" + shard + "/" + cluster + "/" + name
}

func put(t *testing.T, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Put(context.Background(), key, "{}")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func del(t *testing.T, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Delete(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != 1 {
		t.Fatalf("deleting %s deleted %d keys", key, resp.Deleted)
	}
	return resp.Header.Revision
}

// revision asks tr with the barrier, which must answer well within the
// deadline: the periodic progress notification is ten minutes away.
func revision(t *testing.T, tr *homerevision.Tracker, shard string, gr schema.GroupResource) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := tr.Revision(ctx, shard, gr)
	if err != nil {
		t.Fatalf("Revision(%s, %s): %v", shard, gr, err)
	}
	return rev
}

// Each write moves its own partition's revision of its own type, at once
// (the barrier), and no other; the wildcard answers the highest of a type.
func TestWritesMoveOnlyTheirPartitionAndType(t *testing.T) {
	c := homerevision.StartEtcd(t)
	tr := runTracker(t, c)
	floor := revision(t, tr, "amber", exports)

	amberExport := objectKey(exports, "amber", "root", "a")
	r1 := put(t, c, amberExport)
	if got := revision(t, tr, "amber", exports); got != r1 {
		t.Errorf("amber's apiexports after a put at %d: %d", r1, got)
	}
	r2 := put(t, c, objectKey(configmaps, "blue", "org", "default/cm"))
	if got := revision(t, tr, "blue", configmaps); got != r2 {
		t.Errorf("blue's configmaps after a put at %d: %d", r2, got)
	}
	for _, tt := range []struct {
		shard string
		gr    schema.GroupResource
		want  int64
	}{
		{"amber", exports, r1},
		{"amber", configmaps, floor},
		{"blue", exports, floor},
		{"blue", configmaps, r2},
		{kcpcache.Wildcard, exports, r1},
		{kcpcache.Wildcard, configmaps, r2},
		{"green", exports, floor},
	} {
		if got := revision(t, tr, tt.shard, tt.gr); got != tt.want {
			t.Errorf("Revision(%s, %s) = %d, want %d", tt.shard, tt.gr, got, tt.want)
		}
	}

	// Keys outside the layout (the epoch marker, a CRD) move nothing.
	put(t, c, prefix+"/epoch")
	put(t, c, prefix+"/apiextensions.k8s.io/customresourcedefinitions/things.example.com")
	if got := revision(t, tr, kcpcache.Wildcard, exports); got != r1 {
		t.Errorf("apiexports moved to %d on writes to other keys", got)
	}

	// A delete is a change.
	r3 := del(t, c, amberExport)
	if got := revision(t, tr, "amber", exports); got != r3 {
		t.Errorf("amber's apiexports after a delete at %d: %d", r3, got)
	}
	if got := revision(t, tr, "blue", configmaps); got != r2 {
		t.Errorf("blue's configmaps moved to %d on amber's delete", got)
	}
	if got, ok := tr.Known("amber", exports); !ok || got != r3 {
		t.Errorf("Known(amber, apiexports) = %d, %v; want %d, true", got, ok, r3)
	}
}

// Every write acknowledged before Revision is covered, also when the
// tracker's watch has not delivered it yet: many writes, each asked at once.
func TestRevisionCoversEveryAcknowledgedWrite(t *testing.T) {
	c := homerevision.StartEtcd(t)
	tr := runTracker(t, c)
	revision(t, tr, "amber", exports)
	for i := range 200 {
		shard := []string{"amber", "blue"}[i%2]
		r := put(t, c, objectKey(exports, shard, "root", "x"))
		if got := revision(t, tr, shard, exports); got < r {
			t.Fatalf("write %d at revision %d: Revision answered %d", i, r, got)
		}
	}
}

// A barrier returns promptly when the last writes are outside the prefix,
// which the watch never sees: it asks the watch for progress rather than
// waiting for a periodic notification (ten minutes away here).
func TestRevisionAfterWritesElsewhereIsPrompt(t *testing.T) {
	c := homerevision.StartEtcd(t)
	tr := runTracker(t, c)
	r := put(t, c, objectKey(exports, "amber", "root", "x"))
	revision(t, tr, "amber", exports)
	put(t, c, "/elsewhere/key")
	start := time.Now()
	if got := revision(t, tr, "amber", exports); got != r {
		t.Errorf("Revision = %d, want %d", got, r)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the barrier took %v after a write outside the prefix", took)
	}
	if processed := tr.Processed(); processed <= r {
		t.Errorf("processed %d: the progress notification did not move it past %d", processed, r)
	}
}

// A tracker that starts after deletions cannot know them one by one: every
// answer, for types with objects or without, is at least its start
// revision (the floor).
func TestStartRevisionIsTheFloor(t *testing.T) {
	c := homerevision.StartEtcd(t)
	kept := put(t, c, objectKey(exports, "amber", "root", "kept"))
	gone := objectKey(configmaps, "amber", "root", "default/gone")
	put(t, c, gone)
	deleted := del(t, c, gone)

	tr := homerevision.NewTracker(c, prefix)
	if _, ok := tr.Known("amber", exports); ok {
		t.Fatal("Known is ok before the tracker ran")
	}
	tr = runTracker(t, c)
	if got := revision(t, tr, "amber", configmaps); got < deleted {
		t.Errorf("configmaps after a delete at %d before the start: %d", deleted, got)
	}
	if got := revision(t, tr, "amber", exports); got < deleted || got <= kept {
		t.Errorf("apiexports: %d, want the floor (at least %d)", got, deleted)
	}
}

// The initialisation reads the keys in pages and learns every partition of
// every type from them, whichever page holds it.
func TestInitialisationLearnsEveryPartitionAcrossPages(t *testing.T) {
	c := homerevision.StartEtcd(t)
	want := map[kcpcache.PartitionRevision]bool{}
	for _, o := range []struct {
		gr           schema.GroupResource
		shard, names string
	}{
		{exports, "amber", "a b c"},
		{exports, "blue", "a"},
		{configmaps, "amber", "default/x"},
		{configmaps, "green", "default/x default/y"},
	} {
		for name := range strings.FieldsSeq(o.names) {
			put(t, c, objectKey(o.gr, o.shard, "root", name))
		}
		want[kcpcache.PartitionRevision{Shard: o.shard, Resource: o.gr.String()}] = true
	}

	tr := homerevision.NewTracker(c, prefix)
	tr.SetInitPageSize(2) // seven keys: four pages
	startTracker(t, tr)
	revision(t, tr, "amber", exports) // waits for the initialisation
	_, partitions, ok := tr.Snapshot()
	if !ok {
		t.Fatal("Snapshot is not ok after the tracker answered")
	}
	got := map[kcpcache.PartitionRevision]bool{}
	for _, p := range partitions {
		got[kcpcache.PartitionRevision{Shard: p.Shard, Resource: p.Resource}] = true
	}
	if !maps.Equal(got, want) {
		t.Errorf("partitions after the initialisation: %v, want %v", got, want)
	}
}
