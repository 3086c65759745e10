package client_test

import (
	"errors"
	"slices"
	"sort"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

// newTestIndexer returns an indexer as the informers build it, holding objs.
func newTestIndexer(t *testing.T, objs ...*unstructured.Unstructured) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(client.KeyFunc, client.Indexers())
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func keysOf(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		k, err := client.KeyFunc(o)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fixtureObjects: same name "x" everywhere, clusters unique per shard except
// "dup", which two shards both claim.
func fixtureObjects() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		obj("amber", "root", "", "x", "root"),
		obj("amber", "root", "", "y", ""),
		obj("amber", "org1", "", "x", "root:org1"),
		obj("beige", "org2", "", "x", "root:org2"),
		obj("beige", "org2", "ns", "x", ""),
		obj("beige", "dup", "", "x", "root:dup"),
		obj("cyan", "dup", "", "x", "root:dup"),
		obj("", "", "", "x", ""), // no annotations at all
	}
}

func TestListByIndexes(t *testing.T) {
	idx := newTestIndexer(t, fixtureObjects()...)
	tests := []struct {
		name string
		list func() ([]*unstructured.Unstructured, error)
		want []string
	}{
		{"cluster root", func() ([]*unstructured.Unstructured, error) { return client.ListByCluster(idx, "root") },
			[]string{"amber|root|x", "amber|root|y"}},
		{"cluster with namespaced objects", func() ([]*unstructured.Unstructured, error) { return client.ListByCluster(idx, "org2") },
			[]string{"beige|org2|ns/x", "beige|org2|x"}},
		{"cluster on two shards", func() ([]*unstructured.Unstructured, error) { return client.ListByCluster(idx, "dup") },
			[]string{"beige|dup|x", "cyan|dup|x"}},
		{"unknown cluster", func() ([]*unstructured.Unstructured, error) { return client.ListByCluster(idx, "nope") }, []string{}},
		{"objects without annotations are not under the empty cluster", func() ([]*unstructured.Unstructured, error) { return client.ListByCluster(idx, "") }, []string{}},
		{"shard amber", func() ([]*unstructured.Unstructured, error) { return client.ListByShard(idx, "amber") },
			[]string{"amber|org1|x", "amber|root|x", "amber|root|y"}},
		{"shard cyan", func() ([]*unstructured.Unstructured, error) { return client.ListByShard(idx, "cyan") }, []string{"cyan|dup|x"}},
		{"wildcard is not a shard", func() ([]*unstructured.Unstructured, error) { return client.ListByShard(idx, "*") }, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.list()
			if err != nil {
				t.Fatal(err)
			}
			if keys := keysOf(t, got); !slices.Equal(keys, tc.want) {
				t.Errorf("got %v, want %v", keys, tc.want)
			}
		})
	}
}

func TestGetByIndexes(t *testing.T) {
	idx := newTestIndexer(t, fixtureObjects()...)
	tests := []struct {
		name          string
		get           func() (*unstructured.Unstructured, error)
		wantKey       string
		wantNotFound  bool
		wantAmbiguous bool
	}{
		{"cluster and name", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "root", "x") }, "amber|root|x", false, false},
		{"same name, other cluster", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "org1", "x") }, "amber|org1|x", false, false},
		{"namespaced by namespace/name", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "org2", "ns/x") }, "beige|org2|ns/x", false, false},
		{"cluster-scoped name does not match namespaced", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "org2", "x") }, "beige|org2|x", false, false},
		{"missing name", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "root", "nope") }, "", true, false},
		{"missing cluster", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "nope", "x") }, "", true, false},
		{"cluster claimed by two shards", func() (*unstructured.Unstructured, error) { return client.GetByClusterAndName(idx, "dup", "x") }, "", false, true},
		{"path and name", func() (*unstructured.Unstructured, error) { return client.GetByPathAndName(idx, "root:org1", "x") }, "amber|org1|x", false, false},
		{"path root", func() (*unstructured.Unstructured, error) { return client.GetByPathAndName(idx, "root", "x") }, "amber|root|x", false, false},
		{"objects without a path are not indexed by it", func() (*unstructured.Unstructured, error) { return client.GetByPathAndName(idx, "root", "y") }, "", true, false},
		{"a cluster name is not a path", func() (*unstructured.Unstructured, error) { return client.GetByPathAndName(idx, "org1", "x") }, "", true, false},
		{"path claimed twice", func() (*unstructured.Unstructured, error) { return client.GetByPathAndName(idx, "root:dup", "x") }, "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get()
			switch {
			case tc.wantNotFound:
				if !apierrors.IsNotFound(err) {
					t.Fatalf("err = %v, want NotFound", err)
				}
			case tc.wantAmbiguous:
				if !errors.Is(err, client.ErrAmbiguous) {
					t.Fatalf("err = %v, want ErrAmbiguous", err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if k, _ := client.KeyFunc(got); k != tc.wantKey {
					t.Errorf("got %q, want %q", k, tc.wantKey)
				}
			}
		})
	}
}

func TestIndexesFollowUpdatesAndDeletes(t *testing.T) {
	o := obj("amber", "root", "", "x", "root")
	idx := newTestIndexer(t, o)
	// Moving the path annotation must move the index entry.
	moved := o.DeepCopy()
	annotations := moved.GetAnnotations()
	annotations["kcp.io/path"] = "root:new"
	moved.SetAnnotations(annotations)
	if err := idx.Update(moved); err != nil {
		t.Fatal(err)
	}
	if _, err := client.GetByPathAndName(idx, "root", "x"); !apierrors.IsNotFound(err) {
		t.Errorf("old path still indexed: %v", err)
	}
	if _, err := client.GetByPathAndName(idx, "root:new", "x"); err != nil {
		t.Errorf("new path not indexed: %v", err)
	}
	if err := idx.Delete(moved); err != nil {
		t.Fatal(err)
	}
	if objs, err := client.ListByCluster(idx, "root"); err != nil || len(objs) != 0 {
		t.Errorf("after delete: %d objects, err %v", len(objs), err)
	}
}

func TestIndexHelpersReportForeignObjects(t *testing.T) {
	idx := cache.NewIndexer(client.KeyFunc, client.Indexers())
	// A typed object in the indexer cannot be returned as unstructured.
	if err := idx.Add(&typedThing{obj("amber", "root", "", "x", "")}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.GetByClusterAndName(idx, "root", "x"); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("err = %v, want a type error", err)
	}
}

// typedThing stands for a typed object that is not *unstructured.Unstructured.
type typedThing struct{ *unstructured.Unstructured }

func TestHelpersNeedTheIndexes(t *testing.T) {
	bare := cache.NewIndexer(client.KeyFunc, cache.Indexers{})
	if _, err := client.GetByClusterAndName(bare, "root", "x"); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("err = %v, want a missing-index error", err)
	}
}
