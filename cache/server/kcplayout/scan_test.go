package kcplayout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// The scan visits every key below the prefix once, in key order, whatever
// the CRDs that bound its pages declare: keys of declared resources, of
// identities, of undeclared ones, between and around them.
func TestScanVisitsEveryKeyOnceInOrder(t *testing.T) {
	kv := etcdtest.Client(t, embeddedetcd.Config{})
	keys := []string{
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/system:cache:server/system:system-crds/widgets.example.io",
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/root/root/apiexports.apis.kcp.io",
		prefix + "/apiextensions.k8s.io/customresourcedefinitions/root/root/nodot",
		prefix + "/apis.kcp.io/apiexports/root/root/a",
		prefix + "/apis.kcp.io/apiexports/root/root/b",
		prefix + "/apis.kcp.io/apiexports/customresources/root/root/c",
		prefix + "/apis.kcp.io/apiexports:5e5e/root/root/d",
		prefix + "/apis.kcp.io/apiexports0/root/root/e",
		prefix + "/apis.kcp.io/apiexportsx/root/root/f",
		prefix + "/apis.kcp.io/other/root/root/g",
		prefix + "/configmaps/5e5e/root/root/ns/h",
		prefix + "/example.io/widgets/root/root/i",
		prefix + "/example.io/widgets/root/root/j",
		prefix + "/example.io/widgets/root/root/k",
		prefix + "/example.io/widgets:5e5e/root/root/l",
		prefix + "/kcp-cache/claims",
		prefix + "/zzz",
	}
	data := map[string]string{prefix + "-other/x": "{}", "/cachf": "{}"}
	for _, k := range keys {
		data[k] = "{}"
	}
	put(t, kv, data)
	want := slices.Clone(keys)
	slices.Sort(want)
	ctx := context.Background()
	bounds, rev, err := scanBounds(ctx, kv, prefix+"/", prefix+"0")
	if err != nil {
		t.Fatal(err)
	}
	if len(bounds) < 6 {
		t.Fatalf("bounds %q: want the two CRDs' resources to bound ranges", bounds)
	}
	for _, page := range []int64{1, 2, 3, 100} {
		var got []string
		for i := 0; i+1 < len(bounds); i++ {
			if err := scanRange(ctx, kv, bounds[i], bounds[i+1], rev, page, func(key string) error {
				got = append(got, key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d visit\n%q\nwant\n%q", page, got, want)
		}
	}
	var got []string
	if err := scan(ctx, kv, prefix, func(key string) error { got = append(got, key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("scan visits\n%q\nwant\n%q", got, want)
	}
}

// A visit's error ends the scan with that error, however far ahead the
// readers of later ranges are, and the scan waits for them: after it
// returns, nothing of it reads etcd or calls visit.
func TestScanEndsAtTheFirstVisitError(t *testing.T) {
	kv := etcdtest.Client(t, embeddedetcd.Config{})
	data := map[string]string{}
	for _, r := range []string{"as", "bs", "cs", "ds"} {
		crd := prefix + "/apiextensions.k8s.io/customresourcedefinitions/root/root/" + r + ".example.io"
		data[crd] = "{}"
		for i := range 30 {
			data[fmt.Sprintf("%s/example.io/%s/root/root/o%03d", prefix, r, i)] = "{}"
		}
	}
	put(t, kv, data)
	stop := errors.New("stop here")
	var visited atomic.Int64
	ctx := context.Background()
	bounds, rev, err := scanBounds(ctx, kv, prefix+"/", prefix+"0")
	if err != nil {
		t.Fatal(err)
	}
	err = visitRanges(ctx, kv, bounds, rev, 2, func(key string) error {
		if visited.Add(1) == 40 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("scan returned %v, want the visit's error", err)
	}
	if n := visited.Load(); n != 40 {
		t.Errorf("%d visits, want 40: the scan went on after the error, or visits ran after it returned", n)
	}
}
