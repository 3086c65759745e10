package partition

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func objectIn(name string, annotations map[string]string) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

// The watch cache's source leaves out what the cache could not key: an
// object without either partition annotation, in a list and in its watch.
func TestUnpartitionedObjectsAreLeftOut(t *testing.T) {
	both := map[string]string{"kcp.io/shard": "s", "kcp.io/cluster": "c"}
	list := &metav1.PartialObjectMetadataList{Items: []metav1.PartialObjectMetadata{
		objectIn("a", both),
		objectIn("no-shard", map[string]string{"kcp.io/cluster": "c"}),
		objectIn("b", both),
		objectIn("none", nil),
	}}
	u := &unpartitioned{resource: "things"}
	if err := u.filterList(list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "a" || list.Items[1].Name != "b" {
		t.Errorf("list after filtering: %v; want a and b", list.Items)
	}

	fake := watch.NewFake()
	w := u.filterWatch(fake)
	defer w.Stop()
	go func() {
		none, a := objectIn("none", nil), objectIn("a", both)
		fake.Add(&none)
		fake.Modify(&a)
	}()
	select {
	case e := <-w.ResultChan():
		if m, ok := e.Object.(*metav1.PartialObjectMetadata); !ok || m.Name != "a" {
			t.Errorf("first event: %v; want a's (none's left out)", e.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
}
