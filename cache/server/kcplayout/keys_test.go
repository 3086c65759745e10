package kcplayout

import (
	"encoding/json"
	"strings"
	"testing"
)

func object(name, namespace string, annotations map[string]string) []byte {
	m := map[string]any{"name": name}
	if namespace != "" {
		m["namespace"] = namespace
	}
	if annotations != nil {
		m["annotations"] = annotations
	}
	data, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Thing", "metadata": m, "spec": map[string]any{"size": json.Number("12345678901234567890")}})
	return data
}

// Every key is read in the layout it is in, and only there: a key and its
// value that agree with neither layout are left to the caller as neither.
func TestClassify(t *testing.T) {
	const p = "/cache"
	hash := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		key   string
		value []byte
		want  string
	}{
		{"/cache/apis.kcp.io/apiexports/customresources/root/root/one", object("one", "", nil), LayoutKCP},
		{"/cache/apis.kcp.io/apiexports/" + hash + "/root/root/one", object("one", "", nil), LayoutKCP},
		{"/cache/rbac.authorization.k8s.io/roles/customresources/root/root/default/r1", object("r1", "default", nil), LayoutKCP},
		{"/cache/rbac.authorization.k8s.io/clusterroles/customresources/root/root/system:kcp:bind", object("system:kcp:bind", "", nil), LayoutKCP},
		{"/cache/apis.kcp.io/apiexports/root/root/one", object("one", "", nil), LayoutOurs},
		{"/cache/apis.kcp.io/apiexports:" + hash + "/root/root/one", object("one", "", nil), LayoutOurs},
		// Six segments: a namespaced object of ours, told from kcp's by its namespace.
		{"/cache/rbac.authorization.k8s.io/roles/root/root/default/r1", object("r1", "default", nil), LayoutOurs},
		{"/cache/widgets.example.io/widgets:" + hash + "/root/root/default/w", object("w", "default", nil), LayoutOurs},
		// A shard named customresources is a shard of ours when the value says so.
		{"/cache/rbac.authorization.k8s.io/roles/customresources/root/default/r1", object("r1", "default", nil), LayoutOurs},
		// The core group has no group segment.
		{"/cache/configmaps/" + hash + "/root/root/default/c1", object("c1", "default", nil), LayoutKCP},
		{"/cache/namespaces/" + hash + "/root/root/n1", object("n1", "", nil), LayoutKCP},
		{"/cache/configmaps:" + hash + "/root/root/default/c1", object("c1", "default", nil), LayoutOurs},
		{"/cache/namespaces:" + hash + "/root/root/n1", object("n1", "", nil), LayoutOurs},
		// kcp's cache takes any identity a client names; only a hash is told from a resource.
		{"/cache/example.io/widgets/abc/root/root/w", object("w", "", nil), LayoutKCP},
		{"/cache/namespaces/abc/root/root/n1", object("n1", "", nil), LayoutOurs},
		{"/cache/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/apiexports.apis.kcp.io", object("apiexports.apis.kcp.io", "", nil), LayoutCRD},
		{"/cache/kcp-cache/epoch", []byte("c6e9"), LayoutBookkeeping},
		// Neither: the value names another object, is not JSON, or a segment is no name.
		{"/cache/apis.kcp.io/apiexports/customresources/root/root/one", object("two", "", nil), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports/customresources/root/root/one", []byte("\x6b\x38\x73\x00"), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports/customresources/Root/root/one", object("one", "", nil), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports/root/root:org/one", object("one", "", nil), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports/one", object("one", "", nil), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports/a/b/c/d/e/one", object("one", "", nil), LayoutNeither},
		{"/cache/apis.kcp.io/apiexports//root/root/one", object("one", "", nil), LayoutNeither},
		{"/other/apis.kcp.io/apiexports/root/root/one", object("one", "", nil), LayoutNeither},
	} {
		if got := Classify(p, tc.key, tc.value); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.key, got, tc.want)
		}
	}
}

// An object's key in one layout is found again from its key in the other.
func TestKeysRoundTrip(t *testing.T) {
	hash := strings.Repeat("0f", 32)
	for _, k := range []Key{
		{Group: "apis.kcp.io", Resource: "apiexports", Shard: "root", Cluster: "root", Name: "one"},
		{Group: "apis.kcp.io", Resource: "apiexports:" + hash, Shard: "shard-1", Cluster: "2abc", Name: "one"},
		{Group: "rbac.authorization.k8s.io", Resource: "roles", Shard: "root", Cluster: "root", Namespace: "default", Name: "r1"},
		{Resource: "configmaps:" + hash, Shard: "root", Cluster: "root", Namespace: "default", Name: "c1"},
		{Resource: "namespaces:" + hash, Shard: "root", Cluster: "root", Name: "n1"},
	} {
		m := meta{Name: k.Name, Namespace: k.Namespace}
		for _, key := range []string{k.Ours("/cache"), k.KCP("/cache/")} {
			segs, _ := segments("/cache", key)
			got, _, ok := parse(segs, m)
			if !ok || got != k {
				t.Errorf("parse(%s) = %+v, %v; want %+v", key, got, ok, k)
			}
		}
	}
	if got, want := (Key{Group: "apis.kcp.io", Resource: "apiexports:" + hash, Shard: "s", Cluster: "c", Name: "n"}).KCP("/cache"),
		"/cache/apis.kcp.io/apiexports/"+hash+"/s/c/n"; got != want {
		t.Errorf("KCP() = %s, want %s", got, want)
	}
}

// withPartition sets both annotations from the key and keeps every other
// byte's meaning, numbers beyond float64 included.
func TestWithPartition(t *testing.T) {
	in := object("one", "", map[string]string{"kcp.io/cluster": "wrong", "kcp.io/path": "root:org"})
	out, err := withPartition(in, Key{Shard: "shard-1", Cluster: "2abc"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shard != "shard-1" || m.Cluster != "2abc" || m.Name != "one" {
		t.Errorf("after withPartition: %+v", m)
	}
	for _, want := range []string{`"size":12345678901234567890`, `"kcp.io/path":"root:org"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("withPartition lost %s: %s", want, out)
		}
	}
}
