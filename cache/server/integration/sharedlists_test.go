package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// TestIdenticalListsInLineShareOneRead holds a server's LIST budget with a
// LIST that waits in the watch cache for a resourceVersion that does not
// come, and meanwhile sends identical LISTs, each right after its own
// create, beside LISTs of another partition and of metadata only. Every
// answer must hold what its requester wrote before it asked (a LIST is
// never answered from a read older than itself), the other partition's
// and the metadata LISTs must get their own answers, and some identical
// LISTs must be answered together (kcpcache.SharedListHeader).
func TestIdenticalListsInLineShareOneRead(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.Limits.MaxListObjectsInFlight = 2
		o.Limits.ListWaitTimeout = 30 * time.Second
	}))
	ctx := testContext(t)
	c := dyn(t, srv, "alpha", "root").Resource(apiExports)
	after := createTwo(t, ctx, c)
	other := dyn(t, srv, "alpha", "other").Resource(apiExports)
	if _, err := other.Create(ctx, apiExport("elsewhere", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	listOf := func(cluster string) string {
		return srv.Config().Host + kcpcache.ScopedPath(kcpcache.Scope{Shard: "alpha", Cluster: cluster}, "/apis/apis.kcp.io/v1alpha1/apiexports")
	}
	future := listOf("root") + after

	const listers = 8
	round := 0
	cachetest.Eventually(t, "identical LISTs answered together", func(ctx context.Context) error {
		round++
		// The holder reserves the whole budget, then waits up to the
		// watch cache's three seconds; the LISTs below wait in line.
		var wg sync.WaitGroup
		wg.Go(func() { _, _, _, _ = get(ctx, h, future) })
		type answer struct {
			code   int
			shared bool
			kind   string
			names  []string
			err    error
		}
		list := func(u, accept string) answer {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return answer{err: err}
			}
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := h.Do(req)
			if err != nil {
				return answer{err: err}
			}
			defer resp.Body.Close()
			var l struct {
				Kind  string `json:"kind"`
				Items []struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
				} `json:"items"`
			}
			a := answer{code: resp.StatusCode, shared: resp.Header.Get(kcpcache.SharedListHeader) == "true"}
			if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
				a.err = err
				return a
			}
			a.kind = l.Kind
			for _, it := range l.Items {
				a.names = append(a.names, it.Metadata.Name)
			}
			return a
		}
		answers := make([]answer, listers)
		wrote := make([]string, listers)
		var metadataOnly, elsewhere answer
		for i := range listers {
			wrote[i] = fmt.Sprintf("r%d-l%d", round, i)
			wg.Go(func() {
				if _, err := c.Create(ctx, apiExport(wrote[i], nil), metav1.CreateOptions{}); err != nil {
					answers[i] = answer{err: err}
					return
				}
				answers[i] = list(listOf("root"), "")
			})
		}
		wg.Go(func() {
			metadataOnly = list(listOf("root"), "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
		})
		wg.Go(func() { elsewhere = list(listOf("other"), "") })
		wg.Wait()

		shared := 0
		for i, a := range answers {
			switch {
			case a.err != nil:
				t.Fatalf("LIST %d: %v", i, a.err)
			case a.code != http.StatusOK:
				t.Fatalf("LIST %d answered %d", i, a.code)
			case a.kind != "APIExportList":
				t.Errorf("LIST %d is a %q", i, a.kind)
			case !slices.Contains(a.names, wrote[i]) || !slices.Contains(a.names, "e0"):
				t.Errorf("LIST %d (shared: %t) lacks %s, written before it was sent: %v", i, a.shared, wrote[i], a.names)
			case slices.Contains(a.names, "elsewhere"):
				t.Errorf("LIST %d holds another partition's object: %v", i, a.names)
			}
			if a.shared {
				shared++
			}
		}
		if metadataOnly.err != nil || metadataOnly.code != http.StatusOK || metadataOnly.kind != "PartialObjectMetadataList" || !slices.Contains(metadataOnly.names, "e1") {
			t.Errorf("metadata-only LIST: %d %q %v %v", metadataOnly.code, metadataOnly.kind, metadataOnly.names, metadataOnly.err)
		}
		if elsewhere.err != nil || elsewhere.code != http.StatusOK || !slices.Equal(elsewhere.names, []string{"elsewhere"}) {
			t.Errorf("the other partition's LIST: %d %v %v", elsewhere.code, elsewhere.names, elsewhere.err)
		}
		if t.Failed() {
			t.FailNow()
		}
		if shared == 0 {
			return fmt.Errorf("round %d: no LIST of %d was answered together with another", round, listers)
		}
		t.Logf("round %d: %d of %d identical LISTs were answered with another's read", round, shared, listers)
		return nil
	})
}
