package client_test

import (
	"errors"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-cache/kcp-cache/cache/client"
)

var apiExports = schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}

var errBroken = errors.New("indexer is broken")

// brokenIndexer fails every index lookup and counts them.
type brokenIndexer struct {
	cache.Indexer
	calls int
}

func (b *brokenIndexer) ByIndex(string, string) ([]interface{}, error) {
	b.calls++
	return nil, errBroken
}

// from labels an object with where it was read, to tell the sources apart.
func from(o *unstructured.Unstructured, source string) *unstructured.Unstructured {
	c := o.DeepCopy()
	c.SetLabels(map[string]string{"source": source})
	return c
}

func TestFallbackGet(t *testing.T) {
	local := newTestIndexer(t,
		from(obj("amber", "root", "", "x", "root"), "local"),
		from(obj("amber", "dup", "", "x", ""), "local"),
		from(obj("beige", "dup", "", "x", ""), "local"),
	)
	remote := newTestIndexer(t,
		from(obj("amber", "root", "", "x", "root"), "cache"),
		from(obj("beige", "org", "", "x", "root:org"), "cache"),
	)
	brokenCache := &brokenIndexer{Indexer: remote}

	type lookup func(client.Fallback) (*unstructured.Unstructured, error)
	byClusterAndName := func(cluster, name string) lookup {
		return func(f client.Fallback) (*unstructured.Unstructured, error) {
			return f.GetByClusterAndName(cluster, name)
		}
	}
	byPathAndName := func(path, name string) lookup {
		return func(f client.Fallback) (*unstructured.Unstructured, error) { return f.GetByPathAndName(path, name) }
	}
	tests := []struct {
		name       string
		fallback   client.Fallback
		get        lookup
		wantSource string
		wantErr    func(error) bool
	}{
		{name: "local wins", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byClusterAndName("root", "x"), wantSource: "local"},
		{name: "local miss falls back to the cache", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byClusterAndName("org", "x"), wantSource: "cache"},
		{name: "miss in both is NotFound", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byClusterAndName("org", "nope"), wantErr: isNotFoundFor("nope")},
		{name: "local error is returned, not hidden by the cache", fallback: client.Fallback{Local: &brokenIndexer{Indexer: local}, Cache: remote, Resource: apiExports},
			get: byClusterAndName("org", "x"), wantErr: isErr(errBroken)},
		{name: "local ambiguity is returned", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byClusterAndName("dup", "x"), wantErr: isErr(client.ErrAmbiguous)},
		{name: "cache error after a local miss is returned", fallback: client.Fallback{Local: local, Cache: brokenCache, Resource: apiExports},
			get: byClusterAndName("org", "x"), wantErr: isErr(errBroken)},
		{name: "cache is not asked after a local hit", fallback: client.Fallback{Local: local, Cache: brokenCache, Resource: apiExports},
			get: byClusterAndName("root", "x"), wantSource: "local"},
		{name: "no local means cache only", fallback: client.Fallback{Cache: remote, Resource: apiExports},
			get: byClusterAndName("root", "x"), wantSource: "cache"},
		{name: "no cache is an error after a local miss", fallback: client.Fallback{Local: local, Resource: apiExports},
			get: byClusterAndName("org", "x"), wantErr: isErr(client.ErrNoCache)},
		{name: "path: local wins", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byPathAndName("root", "x"), wantSource: "local"},
		{name: "path: cache fallback", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byPathAndName("root:org", "x"), wantSource: "cache"},
		{name: "path: miss in both", fallback: client.Fallback{Local: local, Cache: remote, Resource: apiExports},
			get: byPathAndName("root:nope", "x"), wantErr: isNotFoundFor("x")},
		{name: "path: local error", fallback: client.Fallback{Local: &brokenIndexer{Indexer: local}, Cache: remote, Resource: apiExports},
			get: byPathAndName("root:org", "x"), wantErr: isErr(errBroken)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.get(tc.fallback)
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("unexpected error %v", err)
				}
				if got != nil {
					t.Errorf("got an object with the error: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := got.GetLabels()["source"]; s != tc.wantSource {
				t.Errorf("read from %q, want %q", s, tc.wantSource)
			}
		})
	}
	if brokenCache.calls != 1 {
		t.Errorf("the broken cache was asked %d times, want once (only after a local miss)", brokenCache.calls)
	}
}

func TestFallbackListByCluster(t *testing.T) {
	local := newTestIndexer(t,
		from(obj("amber", "root", "", "x", ""), "local"),
		from(obj("amber", "root", "", "y", ""), "local"),
	)
	remote := newTestIndexer(t,
		from(obj("amber", "root", "", "x", ""), "cache"),
		from(obj("beige", "org", "", "x", ""), "cache"),
		from(obj("beige", "org", "", "z", ""), "cache"),
	)
	tests := []struct {
		name       string
		fallback   client.Fallback
		cluster    string
		wantKeys   []string
		wantSource string
		wantErr    error
	}{
		{name: "local cluster comes from local", fallback: client.Fallback{Local: local, Cache: remote}, cluster: "root",
			wantKeys: []string{"amber|root|x", "amber|root|y"}, wantSource: "local"},
		{name: "remote cluster comes from the cache", fallback: client.Fallback{Local: local, Cache: remote}, cluster: "org",
			wantKeys: []string{"beige|org|x", "beige|org|z"}, wantSource: "cache"},
		{name: "unknown cluster is empty, not an error", fallback: client.Fallback{Local: local, Cache: remote}, cluster: "nope",
			wantKeys: []string{}},
		{name: "local error is returned", fallback: client.Fallback{Local: &brokenIndexer{Indexer: local}, Cache: remote}, cluster: "org",
			wantErr: errBroken},
		{name: "cache error is returned", fallback: client.Fallback{Local: local, Cache: &brokenIndexer{Indexer: remote}}, cluster: "org",
			wantErr: errBroken},
		{name: "no cache", fallback: client.Fallback{Local: local}, cluster: "org", wantErr: client.ErrNoCache},
		{name: "no local", fallback: client.Fallback{Cache: remote}, cluster: "root",
			wantKeys: []string{"amber|root|x"}, wantSource: "cache"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fallback.ListByCluster(tc.cluster)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if keys := keysOf(t, got); !slices.Equal(keys, tc.wantKeys) {
				t.Errorf("got %v, want %v", keys, tc.wantKeys)
			}
			for _, o := range got {
				if s := o.GetLabels()["source"]; s != tc.wantSource {
					t.Errorf("%s read from %q, want %q", o.GetName(), s, tc.wantSource)
				}
			}
		})
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// isNotFoundFor checks for an apierrors NotFound naming the resource and name.
func isNotFoundFor(name string) func(error) bool {
	return func(err error) bool {
		var status apierrors.APIStatus
		if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
			return false
		}
		d := status.Status().Details
		return d != nil && d.Name == name && d.Group == apiExports.Group && d.Kind == apiExports.Resource
	}
}
