package homerevision

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// KeyPrefix is the tests' etcd prefix; exported for the package's external
// tests, as StartEtcd.
const KeyPrefix = "/cache"

// StartEtcd starts an in-memory etcd for the test, whose periodic progress
// notifications are too rare to matter: a barrier that returns quickly did
// so by asking for progress.
func StartEtcd(t *testing.T) *clientv3.Client {
	return etcdtest.Client(t, embeddedetcd.Config{ProgressNotifyInterval: 10 * time.Minute})
}

// A watch whose start was compacted fails, which is what makes Run
// initialise again; the new initialisation raises the floor to its
// revision and lowers nothing.
func TestReinitialisationAfterCompactionRaisesTheFloor(t *testing.T) {
	c := StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exports := schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}
	configmaps := schema.GroupResource{Resource: "configmaps"}
	tr := NewTracker(c, KeyPrefix)
	defer func() { _ = tr.watcher.Close() }()

	first, err := tr.initialise(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := tr.Known("amber", exports); !ok || got != first {
		t.Fatalf("after initialising at %d: Known = %d, %v", first, got, ok)
	}
	// Changes the tracker never sees, then compaction past them.
	cm := KeyPrefix + "//configmaps/amber/root/default/cm"
	if _, err := c.Put(ctx, KeyPrefix+"/apis.kcp.io/apiexports/amber/root/a", "{}"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, cm, "{}"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Delete(ctx, cm)
	if err != nil {
		t.Fatal(err)
	}
	deleted := resp.Header.Revision
	if _, err := c.Compact(ctx, deleted); err != nil {
		t.Fatal(err)
	}

	if err := tr.follow(ctx, first); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("following from compacted revision %d: %v, want the compaction error", first+1, err)
	}
	second, err := tr.initialise(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second < deleted {
		t.Fatalf("initialised again at %d, before the delete at %d", second, deleted)
	}
	for _, gr := range []schema.GroupResource{exports, configmaps, {Group: "never.written", Resource: "things"}} {
		if got, _ := tr.Known("amber", gr); got != second {
			t.Errorf("Known(amber, %s) = %d, want the new floor %d", gr, got, second)
		}
	}
}
