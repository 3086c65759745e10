package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// TestListBudgetRefusesWith429AndAdmitsAfter runs a server whose LIST
// budget is two objects, holds the budget with LISTs of two objects that
// wait in the watch cache for a resourceVersion it has not reached, and
// checks that another LIST is refused with 429, Retry-After and a
// TooManyRequests Status once its short wait is over, and admitted once
// the holders are gone.
//
// It runs with and without SizeBasedListCostEstimate (a standalone server
// turns it off): without it the budget's object counts are etcd's counts of
// the type's keys instead of the size estimator's. Not parallel: feature
// gates are the process's.
func TestListBudgetRefusesWith429AndAdmitsAfter(t *testing.T) {
	for _, sizes := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizes), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, genericfeatures.SizeBasedListCostEstimate, sizes)
			testListBudgetRefusesWith429AndAdmitsAfter(t)
		})
	}
}

func testListBudgetRefusesWith429AndAdmitsAfter(t *testing.T) {
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.Limits.MaxListObjectsInFlight = 2
		o.Limits.ListWaitTimeout = 200 * time.Millisecond
	}))
	ctx := testContext(t)
	c := dyn(t, srv, "alpha", "root").Resource(apiExports)
	after := createTwo(t, ctx, c)
	h, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	list := srv.Config().Host + kcpcache.ScopedPath(kcpcache.Scope{Shard: "alpha", Cluster: "root"}, "/apis/apis.kcp.io/v1alpha1/apiexports")
	future := list + after

	// Each holder LIST reserves the type's two objects, then waits up to
	// the watch cache's three seconds for a resourceVersion that never
	// comes; the loop keeps the budget held but for short gaps.
	holdCtx, stopHolding := context.WithCancel(ctx)
	var holders sync.WaitGroup
	holders.Add(1)
	go func() {
		defer holders.Done()
		for holdCtx.Err() == nil {
			_, _, _, _ = get(holdCtx, h, future)
		}
	}()

	cachetest.Eventually(t, "a LIST refused for the budget", func(ctx context.Context) error {
		code, header, body, err := get(ctx, h, list)
		if err != nil {
			return err
		}
		if code != http.StatusTooManyRequests {
			return fmt.Errorf("LIST answered %d, not 429", code)
		}
		if header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		var status metav1.Status
		if err := json.Unmarshal(body, &status); err != nil {
			t.Errorf("429 body is not a Status: %v: %s", err, body)
		} else if status.Reason != metav1.StatusReasonTooManyRequests || status.Details == nil || status.Details.RetryAfterSeconds <= 0 {
			t.Errorf("429 Status: reason %q, details %+v", status.Reason, status.Details)
		}
		return nil
	})
	stopHolding()
	holders.Wait()

	cachetest.Eventually(t, "a LIST admitted once the budget is free", func(ctx context.Context) error {
		code, _, body, err := get(ctx, h, list)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("LIST answered %d: %s", code, body)
		}
		var l metav1.PartialObjectMetadataList
		if err := json.Unmarshal(body, &l); err != nil {
			return err
		}
		if len(l.Items) != 2 {
			return errors.New("the admitted LIST is not whole")
		}
		return nil
	})
}

// TestLimitOptionsReachTheServer checks that the limit flags configure
// upstream's max-in-flight filter and the data plane's LIST budget.
func TestLimitOptionsReachTheServer(t *testing.T) {
	opts := options.NewOptions()
	opts.RootDirectory = t.TempDir()
	opts.EmbeddedEtcd.ClientPort, opts.EmbeddedEtcd.PeerPort = 0, 0
	listener, port, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	opts.SecureServing.Listener, opts.SecureServing.BindPort = listener, port
	opts.Limits.MaxRequestsInFlight, opts.Limits.MaxMutatingRequestsInFlight = 7, 3
	opts.Limits.MaxListObjectsInFlight, opts.Limits.ListWaitTimeout, opts.Limits.ReturnMemoryAfterLists = 11, time.Second, false
	completed, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := server.NewConfig(completed)
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Apiextensions.GenericConfig; g.MaxRequestsInFlight != 7 || g.MaxMutatingRequestsInFlight != 3 || g.FlowControl != nil {
		t.Errorf("in-flight limits: %d, %d, flow control %v; want 7, 3 and none", g.MaxRequestsInFlight, g.MaxMutatingRequestsInFlight, g.FlowControl)
	}
	if want := (dataplane.ListLimits{MaxObjectsInFlight: 11, WaitTimeout: time.Second}); cfg.Extra.Lists != want {
		t.Errorf("LIST limits: %+v, want %+v", cfg.Extra.Lists, want)
	}
}

// createTwo creates e0 and e1 through c and returns the query of a LIST at a
// resourceVersion far beyond them: such a LIST reserves its share of the
// budget, then waits up to the watch cache's three seconds for a
// resourceVersion that never comes, holding the budget meanwhile.
func createTwo(t *testing.T, ctx context.Context, c dynamic.ResourceInterface) string {
	t.Helper()
	var rv string
	for i := 0; i < 2; i++ {
		o, err := c.Create(ctx, apiExport(fmt.Sprintf("e%d", i), nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv = o.GetResourceVersion()
	}
	current, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return "?" + url.Values{"resourceVersion": {strconv.FormatUint(current+1_000_000, 10)}, "resourceVersionMatch": {"NotOlderThan"}}.Encode()
}

// get GETs u and returns the status code, headers and body.
func get(ctx context.Context, h *http.Client, u string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	resp, err := h.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}
