package partition

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func TestStampPartition(t *testing.T) {
	amber := kcpcache.Scope{Shard: "amber", Cluster: "root"}
	u := &unstructured.Unstructured{}
	if err := stampPartition(u, amber); err != nil {
		t.Fatal(err)
	}
	if a := u.GetAnnotations(); a[kcpcache.AnnotationShard] != "amber" || a[kcpcache.AnnotationCluster] != "root" {
		t.Fatalf("annotations not stamped: %v", a)
	}
	u.SetAnnotations(map[string]string{kcpcache.AnnotationShard: "blue"})
	if err := stampPartition(u, amber); err == nil {
		t.Fatal("a mismatching shard annotation must be refused")
	}
}
