package replication

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func TestTypedLocalObjectsAreConverted(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "things"}
	// Informers hand out typed objects without TypeMeta.
	typed := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "thing", UID: "u", ResourceVersion: "5", Generation: 2,
		Annotations: map[string]string{kcpcache.AnnotationCluster: "root"},
	}}
	u, err := toUnstructured(typed, gvr, "Thing")
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "example.dev/v1" || u.GetKind() != "Thing" || u.GetName() != "thing" || u.GetGeneration() != 2 {
		t.Fatalf("converted = %v", u.Object)
	}
	if d := decide("amber", u, nil); d.action != actionCreate || d.object.GetKind() != "Thing" || d.object.GetUID() != "u" {
		t.Fatalf("decide on a converted object = %s", d.action)
	}
	if _, err := toUnstructured(typed, gvr, ""); err == nil {
		t.Errorf("a typed object without kind, for a resource configured without one, must be refused")
	}
	typed.Annotations["x"] = "y"
	if _, ok := u.GetAnnotations()["x"]; ok {
		t.Errorf("the converted object must not share the informer's")
	}
}
