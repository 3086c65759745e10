package client_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// fakeEpochServer stands in for the round tripper: it announces epoch on
// every list and watch, as a cache server's responses do.
type fakeEpochServer struct {
	epoch     string
	epochs    *client.Epochs
	listRVs   []string
	watchRVs  []string
	watchStop int
}

func (s *fakeEpochServer) announce(ctx context.Context) {
	s.epochs.Observe(s.epoch)
	client.AnnounceEpoch(ctx, s.epoch)
}

func (s *fakeEpochServer) lw() *client.ObservedListerWatcher {
	return client.NewObservedListerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			s.listRVs = append(s.listRVs, o.ResourceVersion)
			s.announce(ctx)
			l := &unstructured.UnstructuredList{}
			l.SetResourceVersion("100")
			return l, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			s.watchRVs = append(s.watchRVs, o.ResourceVersion)
			s.announce(ctx)
			return &countingWatch{Interface: watch.NewRaceFreeFake(), stopped: &s.watchStop}, nil
		},
	}, client.NewFreshness(clocktesting.NewFakePassiveClock(time.Unix(100, 0))), s.epochs)
}

type countingWatch struct {
	watch.Interface
	stopped *int
}

func (w *countingWatch) Stop() { *w.stopped++; w.Interface.Stop() }

func TestInformerNeverResumesAWatchAcrossEpochs(t *testing.T) {
	srv := &fakeEpochServer{epoch: "a", epochs: client.NewEpochs()}
	lw := srv.lw()
	ctx := context.Background()
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "100"})
	if err != nil {
		t.Fatalf("a watch in the list's epoch: %v", err)
	}
	w.Stop()

	// The cache comes back with another history: resuming from 100 would
	// skip or misread what happened.
	srv.epoch = "b"
	_, err = lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "100"})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch across an epoch change: err = %v, want Expired so that the reflector lists again", err)
	}
	if srv.watchStop != 2 {
		t.Errorf("the refused watch was not stopped (%d stops, want 2)", srv.watchStop)
	}
	// The reflector lists "not older than" its last resourceVersion; in the
	// new epoch that would mean nothing, so the list asks for the newest.
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "100"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.listRVs[len(srv.listRVs)-1]; got != "" {
		t.Errorf("relist after an epoch change asked for resourceVersion %q, want the newest (\"\")", got)
	}
	if epoch, _ := lw.LastListEpoch(); epoch != "b" {
		t.Errorf("list epoch = %q, want b", epoch)
	}
	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "100"}); err != nil {
		t.Errorf("a watch in the new list's epoch: %v", err)
	}
	// Within one epoch, lists keep the reflector's resourceVersion.
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "100"}); err != nil {
		t.Fatal(err)
	}
	if got := srv.listRVs[len(srv.listRVs)-1]; got != "100" {
		t.Errorf("list within an epoch asked for resourceVersion %q, want 100", got)
	}
}

func TestEpochRoundTripperRecordsTheHeader(t *testing.T) {
	epochs := client.NewEpochs()
	respond := func(code int, epoch *string) roundTripperFunc {
		return func(*http.Request) (*http.Response, error) {
			h := http.Header{}
			if epoch != nil {
				h.Set(kcpcache.EpochHeader, *epoch)
			}
			return &http.Response{StatusCode: code, Header: h, Body: http.NoBody}, nil
		}
	}
	send := func(rt http.RoundTripper) string {
		t.Helper()
		ctx, epochOf := client.WithEpochHolder(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://cache/x", nil)
		if _, err := client.NewEpochRoundTripper(rt, epochs).RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		e, _ := epochOf()
		return e
	}
	one, two := "one", "two"
	changed := epochs.Changed()
	if got := send(respond(200, &one)); got != "one" {
		t.Fatalf("request epoch %q, want one", got)
	}
	select {
	case <-changed:
	default:
		t.Fatal("the first epoch seen does not count as a change")
	}
	// A proxy's 502 without the header says nothing about the cache.
	send(respond(502, nil))
	if e, _ := epochs.Current(); e != "one" {
		t.Fatalf("after a headerless 502: epoch %q, want one", e)
	}
	changed = epochs.Changed()
	send(respond(404, &two))
	if e, _ := epochs.Current(); e != "two" {
		t.Fatalf("epoch %q, want two", e)
	}
	select {
	case <-changed:
	default:
		t.Fatal("no change signalled")
	}
}

// roundTripperFunc is an http.RoundTripper from a function.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
