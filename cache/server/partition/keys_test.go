package partition

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func TestScopedKey(t *testing.T) {
	const prefix = "/apis.kcp.io/apiexports"
	amber := kcpcache.Scope{Shard: "amber", Cluster: "root"}
	tests := []struct {
		key, want string
		wantErr   bool
	}{
		{key: prefix, want: prefix + "/amber/root"},
		{key: prefix + "/x", want: prefix + "/amber/root/x"},
		{key: prefix + "/ns/x", want: prefix + "/amber/root/ns/x"},
		{key: "/apis.kcp.io/apiexportsX/x", wantErr: true},
		{key: "/other/x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := scopedKey(prefix, amber, tt.key)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("scopedKey(%q) = %q, %v; want %q (error %v)", tt.key, got, err, tt.want, tt.wantErr)
		}
	}
}

// The watch cache and the request path must compute the same key for the
// same object, or the delegator silently falls through to etcd.
func TestObjectKeyAgreesWithScopedKey(t *testing.T) {
	const prefix = "/g/r"
	for _, ns := range []string{"", "default"} {
		u := &unstructured.Unstructured{}
		u.SetName("x")
		u.SetNamespace(ns)
		u.SetAnnotations(map[string]string{kcpcache.AnnotationShard: "amber", kcpcache.AnnotationCluster: "root"})
		fromObject, err := objectKey(prefix, u)
		if err != nil {
			t.Fatal(err)
		}
		requestKey := prefix + "/x"
		if ns != "" {
			requestKey = prefix + "/" + ns + "/x"
		}
		fromRequest, err := scopedKey(prefix, kcpcache.Scope{Shard: "amber", Cluster: "root"}, requestKey)
		if err != nil {
			t.Fatal(err)
		}
		if fromObject != fromRequest {
			t.Errorf("namespace %q: objectKey %q != scopedKey %q", ns, fromObject, fromRequest)
		}
	}
}

func TestObjectKeyNeedsAnnotations(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetName("x")
	if _, err := objectKey("/g/r", u); err == nil {
		t.Fatal("objectKey of an object without partition annotations should fail")
	}
}

func TestPartitionPrefixEndsWithSeparator(t *testing.T) {
	for _, tt := range []struct{ shard, cluster, want string }{
		{"", "", "/g/r/"},
		{"a", "", "/g/r/a/"},
		{"a", "root", "/g/r/a/root/"},
	} {
		if got := partitionPrefix("/g/r", tt.shard, tt.cluster); got != tt.want {
			t.Errorf("partitionPrefix(%q, %q) = %q, want %q", tt.shard, tt.cluster, got, tt.want)
		}
	}
}
