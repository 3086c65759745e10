package client_test

import (
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

func TestKeyFunc(t *testing.T) {
	tests := []struct {
		name string
		obj  interface{}
		want string
	}{
		{"cluster-scoped", obj("amber", "root", "", "x", ""), "amber|root|x"},
		{"namespaced", obj("amber", "root", "ns", "x", ""), "amber|root|ns/x"},
		{"shard with colons", obj("system:cache:server", "system:system-crds", "", "x", ""), "system:cache:server|system:system-crds|x"},
		{"no annotations", obj("", "", "ns", "x", ""), "||ns/x"},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "amber|root|x", Obj: nil}, "amber|root|x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := client.KeyFunc(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("key %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := client.KeyFunc("not an object"); err == nil {
		t.Error("want an error for a non-object")
	}
}

func TestKeysOfSameNamedObjectsDiffer(t *testing.T) {
	seen := map[string]bool{}
	for _, shard := range []string{"amber", "beige"} {
		for _, cluster := range []string{"root", "other"} {
			k, err := client.KeyFunc(obj(shard, cluster, "", "x", ""))
			if err != nil {
				t.Fatal(err)
			}
			if seen[k] {
				t.Fatalf("key %q used twice", k)
			}
			seen[k] = true
		}
	}
}

func TestSplitKey(t *testing.T) {
	tests := []struct {
		key                             string
		shard, cluster, namespace, name string
		wantErr                         bool
	}{
		{key: "amber|root|x", shard: "amber", cluster: "root", name: "x"},
		{key: "amber|root|ns/x", shard: "amber", cluster: "root", namespace: "ns", name: "x"},
		{key: "system:cache:server|system:system-crds|x", shard: "system:cache:server", cluster: "system:system-crds", name: "x"},
		// Names may contain the separator; only the first two count.
		{key: "amber|root|ns/a|b", shard: "amber", cluster: "root", namespace: "ns", name: "a|b"},
		{key: "||ns/x", namespace: "ns", name: "x"},
		{key: "ns/x", wantErr: true},
		{key: "amber|x", wantErr: true},
		{key: "amber|root|a/b/c", wantErr: true},
		{key: "amber|root|", wantErr: true},
		{key: "amber|root|ns/", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			shard, cluster, namespace, name, err := client.SplitKey(tc.key)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want an error, got %q %q %q %q", shard, cluster, namespace, name)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if shard != tc.shard || cluster != tc.cluster || namespace != tc.namespace || name != tc.name {
				t.Errorf("got %q %q %q %q, want %q %q %q %q", shard, cluster, namespace, name, tc.shard, tc.cluster, tc.namespace, tc.name)
			}
			if again := client.ToKey(shard, cluster, namespace, name); again != tc.key {
				t.Errorf("ToKey gives %q, want %q", again, tc.key)
			}
		})
	}
}
