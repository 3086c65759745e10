package kcplayout

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

const prefix = "/cache"

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// contents is every key below the prefix with its value.
func contents(t *testing.T, kv clientv3.KV) map[string]string {
	t.Helper()
	resp, err := kv.Get(testContext(t), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, item := range resp.Kvs {
		out[string(item.Key)] = string(item.Value)
	}
	return out
}

func put(t *testing.T, kv clientv3.KV, data map[string]string) {
	t.Helper()
	for k, v := range data {
		if _, err := kv.Put(testContext(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// Data moved into this server's layout and back is the data kcp's
// cache-server wrote, with the partition annotations its keys implied;
// what only this server uses is gone, and keys in neither layout stay.
func TestMigrateAndExport(t *testing.T) {
	kv := etcdtest.Client(t, embeddedetcd.Config{})
	hash := strings.Repeat("5e", 32)
	shard1 := map[string]string{"kcp.io/shard": "shard-1", "kcp.io/cluster": "2abc"}
	root := map[string]string{"kcp.io/shard": "root", "kcp.io/cluster": "root"}
	kcp := map[string]string{
		prefix + "/apis.kcp.io/apiexports/customresources/shard-1/2abc/one":                                                               string(object("one", "", map[string]string{"kcp.io/cluster": "2abc"})),
		prefix + "/rbac.authorization.k8s.io/roles/customresources/root/root/ns/r1":                                                       string(object("r1", "ns", nil)),
		prefix + "/example.io/widgets/" + hash + "/root/root/ns/w1":                                                                       string(object("w1", "ns", root)),
		prefix + "/configmaps/" + hash + "/root/root/ns/c1":                                                                               string(object("c1", "ns", root)),
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/roles.rbac.authorization.k8s.io": string(object("roles.rbac.authorization.k8s.io", "", nil)),
	}
	neither := map[string]string{
		prefix + "/apis.kcp.io/apiexports/customresources/root":              "{}",
		prefix + "/apis.kcp.io/apiexports/customresources/root/root/renamed": string(object("other", "", nil)),
		prefix + "/registry/protobuf/root/root/ns/x":                         "k8s\x00\x0a",
	}
	put(t, kv, kcp)
	put(t, kv, neither)

	r, err := Migrate(testContext(t), kv, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 4 || r.Annotated != 1 || r.Skipped != 3 || r.Superseded != 0 {
		t.Errorf("Migrate: %+v; want 4 moved, 1 annotated, 3 skipped", r)
	}
	want := map[string]string{
		prefix + "/apis.kcp.io/apiexports/shard-1/2abc/one":                                                                               string(object("one", "", shard1)),
		prefix + "/rbac.authorization.k8s.io/roles/root/root/ns/r1":                                                                       string(object("r1", "ns", root)),
		prefix + "/example.io/widgets:" + hash + "/root/root/ns/w1":                                                                       string(object("w1", "ns", root)),
		prefix + "/configmaps:" + hash + "/root/root/ns/c1":                                                                               string(object("c1", "ns", root)),
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/roles.rbac.authorization.k8s.io": string(object("roles.rbac.authorization.k8s.io", "", map[string]string{"kcp.io/shard": "system:cache:server", "kcp.io/cluster": "system:system-crds"})),
	}
	maps.Copy(want, neither)
	assertContents(t, kv, want)

	// Again: nothing left to do, nothing written.
	rev := revision(t, kv)
	if r, err := Migrate(testContext(t), kv, prefix); err != nil || r.Changed() || r.InPlace != 5 {
		t.Errorf("Migrate again: %+v, %v; want 5 in place, nothing changed", r, err)
	}
	if got := revision(t, kv); got != rev {
		t.Errorf("Migrate again wrote: revision %d, then %d", rev, got)
	}

	// Back to kcp's layout: the objects as they are now, without the
	// heartbeats, the bookkeeping and the CRDs only this server declares.
	put(t, kv, map[string]string{
		prefix + "/kcp-cache/epoch": "c6e9",
		prefix + "/cache.kcp.io/shardheartbeats/root/system:cache-heartbeat/root": string(object("root", "", map[string]string{"kcp.io/shard": "root", "kcp.io/cluster": "system:cache-heartbeat"})),
	})
	put(t, kv, map[string]string{
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/shardheartbeats.cache.kcp.io": string(object("shardheartbeats.cache.kcp.io", "", nil)),
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/gadgets.example.io":           string(object("gadgets.example.io", "", nil)),
		prefix + "/example.io/gadgets:" + hash + "/root/root/g":                                                                        string(object("g", "", root)),
	})
	// The heartbeats' CRD and that of gadgets are this server's alone;
	// gadgets hold an object, so their CRD stays.
	removeCRD := func(name string) bool { return name == "shardheartbeats.cache.kcp.io" || name == "gadgets.example.io" }
	r, err = Export(testContext(t), kv, prefix, removeCRD)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 5 || r.Removed != 3 || r.Skipped != 3 {
		t.Errorf("Export: %+v; want 5 moved, 3 removed (the marker, the heartbeat and its CRD), 3 skipped", r)
	}
	want = map[string]string{
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/roles.rbac.authorization.k8s.io": string(object("roles.rbac.authorization.k8s.io", "", map[string]string{"kcp.io/shard": "system:cache:server", "kcp.io/cluster": "system:system-crds"})),
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/gadgets.example.io":              string(object("gadgets.example.io", "", nil)),
		prefix + "/example.io/gadgets/" + hash + "/root/root/g":                                                                           string(object("g", "", root)),
		prefix + "/apis.kcp.io/apiexports/customresources/shard-1/2abc/one":                                                               string(object("one", "", shard1)),
		prefix + "/rbac.authorization.k8s.io/roles/customresources/root/root/ns/r1":                                                       string(object("r1", "ns", root)),
		prefix + "/example.io/widgets/" + hash + "/root/root/ns/w1":                                                                       string(object("w1", "ns", root)),
		prefix + "/configmaps/" + hash + "/root/root/ns/c1":                                                                               string(object("c1", "ns", root)),
	}
	maps.Copy(want, neither)
	assertContents(t, kv, want)
}

// An object at both keys, which happens when kcp's cache-server ran on
// data this server left without Export and a shard pushed the object again,
// keeps its later write, whichever layout holds it.
func TestMoveKeepsTheLaterWrite(t *testing.T) {
	kv := etcdtest.Client(t, embeddedetcd.Config{})
	root := map[string]string{"kcp.io/shard": "root", "kcp.io/cluster": "root", "v": "1"}
	later := map[string]string{"kcp.io/shard": "root", "kcp.io/cluster": "root", "v": "2"}
	oursA, kcpA := prefix+"/apis.kcp.io/apiexports/root/root/a", prefix+"/apis.kcp.io/apiexports/customresources/root/root/a"
	oursB, kcpB := prefix+"/apis.kcp.io/apiexports/root/root/b", prefix+"/apis.kcp.io/apiexports/customresources/root/root/b"
	// a: kcp's write is the later one; b: ours is.
	put(t, kv, map[string]string{oursA: string(object("a", "", root))})
	put(t, kv, map[string]string{kcpA: string(object("a", "", later))})
	put(t, kv, map[string]string{kcpB: string(object("b", "", root))})
	put(t, kv, map[string]string{oursB: string(object("b", "", later))})

	r, err := Migrate(testContext(t), kv, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 1 || r.Superseded != 1 {
		t.Errorf("Migrate: %+v; want 1 moved, 1 superseded", r)
	}
	assertContents(t, kv, map[string]string{oursA: string(object("a", "", later)), oursB: string(object("b", "", later))})
}

// A migration that stopped half-way (here: one object moved by hand, as
// move would have) is finished by the next run.
func TestMigrateFinishesAnInterruptedRun(t *testing.T) {
	kv := etcdtest.Client(t, embeddedetcd.Config{})
	root := map[string]string{"kcp.io/shard": "root", "kcp.io/cluster": "root"}
	data := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		data[prefix+"/apis.kcp.io/apiexports/customresources/root/root/"+name] = string(object(name, "", root))
	}
	put(t, kv, data)
	res, err := move(testContext(t), kv, prefix+"/apis.kcp.io/apiexports/customresources/root/root/b", prefix+"/apis.kcp.io/apiexports/root/root/b",
		func(v []byte) ([]byte, error) { return v, nil })
	if err != nil || res != moveMoved {
		t.Fatalf("move: %v, %v", res, err)
	}
	r, err := Migrate(testContext(t), kv, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 2 || r.InPlace != 1 {
		t.Errorf("Migrate: %+v; want 2 moved, 1 in place", r)
	}
	want := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		want[prefix+"/apis.kcp.io/apiexports/root/root/"+name] = string(object(name, "", root))
	}
	assertContents(t, kv, want)
}

func revision(t *testing.T, kv clientv3.KV) int64 {
	t.Helper()
	resp, err := kv.Get(testContext(t), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// assertContents compares what etcd holds below the prefix with want,
// values by their meaning: the annotations of a moved object are
// re-encoded.
func assertContents(t *testing.T, kv clientv3.KV, want map[string]string) {
	t.Helper()
	got := contents(t, kv)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: missing", k)
		case !sameJSON(g, v):
			t.Errorf("%s = %s, want %s", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: not expected", k)
		}
	}
}

// sameJSON compares two values as JSON documents (numbers exactly), or as
// bytes when either is not JSON.
func sameJSON(a, b string) bool {
	decode := func(s string) (any, bool) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		return v, d.Decode(&v) == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	if !okA || !okB {
		return a == b
	}
	return reflect.DeepEqual(va, vb)
}
