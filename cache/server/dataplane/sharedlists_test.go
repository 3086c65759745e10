package dataplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

func listRequest(t *testing.T, target string, change func(*http.Request) *http.Request) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("User-Agent", "a")
	ctx := request.WithRequestInfo(req.Context(), &request.RequestInfo{IsResourceRequest: true, Verb: "list"})
	ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "shard", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"k": {"v"}}})
	ctx = kcpcache.WithScope(ctx, kcpcache.Scope{Shard: "s", Cluster: "c"})
	req = req.WithContext(ctx)
	if change != nil {
		req = change(req)
	}
	return req
}

// Two LISTs share a key exactly when nothing their answers depend on
// differs.
func TestFlightKeyTellsAnswersApart(t *testing.T) {
	base := listRequest(t, "/apis/g/v1/things?resourceVersion=0", nil)
	key, ok := flightKey(base)
	if !ok {
		t.Fatal("a LIST with a user has no key")
	}
	withCtx := func(f func(context.Context) context.Context) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request { return r.WithContext(f(r.Context())) }
	}
	withUser := func(u user.Info) func(*http.Request) *http.Request {
		return withCtx(func(ctx context.Context) context.Context { return request.WithUser(ctx, u) })
	}
	withHeader := func(k, v string) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request { r.Header.Set(k, v); return r }
	}
	same := map[string]*http.Request{
		"another user agent": listRequest(t, "/apis/g/v1/things?resourceVersion=0", withHeader("User-Agent", "b")),
	}
	for name, req := range same {
		if k, _ := flightKey(req); k != key {
			t.Errorf("%s: another key", name)
		}
	}
	differ := map[string]*http.Request{
		"query":       listRequest(t, "/apis/g/v1/things", nil),
		"path":        listRequest(t, "/apis/g/v1/others?resourceVersion=0", nil),
		"accept":      listRequest(t, "/apis/g/v1/things?resourceVersion=0", withHeader("Accept", "application/cbor")),
		"no gzip":     listRequest(t, "/apis/g/v1/things?resourceVersion=0", withHeader("Accept-Encoding", "identity")),
		"own header":  listRequest(t, "/apis/g/v1/things?resourceVersion=0", withHeader(kcpcache.CopyBookkeepingHeader, "keep")),
		"user name":   listRequest(t, "/apis/g/v1/things?resourceVersion=0", withUser(&user.DefaultInfo{Name: "other", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"k": {"v"}}})),
		"user groups": listRequest(t, "/apis/g/v1/things?resourceVersion=0", withUser(&user.DefaultInfo{Name: "shard", Groups: []string{"g1"}, Extra: map[string][]string{"k": {"v"}}})),
		"user extra":  listRequest(t, "/apis/g/v1/things?resourceVersion=0", withUser(&user.DefaultInfo{Name: "shard", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"k": {"w"}}})),
		// A group name that runs into the extra's key must not collide.
		"group as extra": listRequest(t, "/apis/g/v1/things?resourceVersion=0", withUser(&user.DefaultInfo{Name: "shard", Groups: []string{"g1", "g2", "k", "v"}})),
		"scope": listRequest(t, "/apis/g/v1/things?resourceVersion=0", withCtx(func(ctx context.Context) context.Context {
			return kcpcache.WithScope(ctx, kcpcache.Scope{Shard: "s", Cluster: "d"})
		})),
		"bookkeeping hidden": listRequest(t, "/apis/g/v1/things?resourceVersion=0", withCtx(kcpcache.WithoutCopyBookkeeping)),
	}
	for name, req := range differ {
		if k, ok := flightKey(req); !ok || k == key {
			t.Errorf("%s: the same key (or none)", name)
		}
	}
	watch := listRequest(t, "/apis/g/v1/things?watch=true", withCtx(func(ctx context.Context) context.Context {
		return request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: true, Verb: "watch"})
	}))
	if _, ok := flightKey(watch); ok {
		t.Error("a WATCH has a key: it would hold its flight open while it runs")
	}
	anonymous := httptest.NewRequest(http.MethodGet, "/apis/g/v1/things", nil)
	anonymous = anonymous.WithContext(request.WithRequestInfo(anonymous.Context(), &request.RequestInfo{Verb: "list"}))
	if _, ok := flightKey(anonymous); ok {
		t.Error("a LIST without a user has a key")
	}
}

// A flight takes joiners until it reads, then none; its answer is what
// the leader wrote, or nothing when the leader failed or went away.
func TestFlightsJoinOnlyBeforeTheRead(t *testing.T) {
	f := newListFlights()
	fl, leader := f.lead("k")
	if !leader {
		t.Fatal("the first LIST does not lead")
	}
	j, leader := f.lead("k")
	if leader || j != fl {
		t.Fatal("an identical LIST before the read does not join")
	}
	if _, leader := f.lead("other"); !leader {
		t.Fatal("another key joins")
	}
	underlying := httptest.NewRecorder()
	underlying.Header().Set("Audit-Id", "leader's own")
	fw := &flightWriter{w: underlying}
	(&flightStart{flights: f, flight: fl, writer: fw}).begin()
	if next, leader := f.lead("k"); !leader || next == fl {
		t.Fatal("a LIST after the read joins it")
	}
	fw.Header().Set("Content-Type", "application/json")
	fw.Header().Set("Content-Encoding", "gzip")
	fw.WriteHeader(http.StatusOK)
	_, _ = fw.Write([]byte("the answer"))
	fw.Flush()
	if underlying.Body.Len() != 0 {
		t.Fatal("a recorded answer reached the leader's connection before it was complete")
	}
	a := fw.answer(context.Background(), 1)
	if a == nil {
		t.Fatal("nothing recorded for the joiners")
	}
	f.finish(fl, a)
	<-j.done
	for _, joined := range []bool{false, true} {
		w := httptest.NewRecorder()
		w.Header().Set("Audit-Id", "own")
		j.answer.writeTo(w, joined)
		if w.Code != http.StatusOK || w.Body.String() != "the answer" || w.Header().Get("Content-Encoding") != "gzip" || w.Header().Get("Audit-Id") != "own" {
			t.Errorf("joined %t: %d %q %v", joined, w.Code, w.Body.String(), w.Header())
		}
		if got := w.Header().Get(kcpcache.SharedListHeader) == "true"; got != joined {
			t.Errorf("joined %t: shared header %t", joined, got)
		}
	}

	// No joiners: the answer streams to the leader's connection, and there
	// is nothing to share.
	alone, _ := f.lead("alone")
	direct := httptest.NewRecorder()
	fw = &flightWriter{w: direct}
	(&flightStart{flights: f, flight: alone, writer: fw}).begin()
	_, _ = fw.Write([]byte("streamed"))
	if direct.Body.String() != "streamed" || fw.answer(context.Background(), 1) != nil {
		t.Errorf("a LIST alone: streamed %q, shared %v", direct.Body.String(), fw.answer(context.Background(), 1))
	}

	// The leader's client went away while the answer was recorded: it may
	// be cut short, and the joiners serve themselves.
	gone, _ := f.lead("gone")
	f.lead("gone")
	fw = &flightWriter{w: httptest.NewRecorder()}
	(&flightStart{flights: f, flight: gone, writer: fw}).begin()
	_, _ = fw.Write([]byte("half"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if fw.answer(ctx, 1) != nil {
		t.Error("an answer recorded for a request that ended is shared")
	}

	// The leader failed before it read (no start): its joiners serve
	// themselves and the key is free for a new flight.
	failed, _ := f.lead("failed")
	joiner, _ := f.lead("failed")
	f.finish(failed, nil)
	<-joiner.done
	if joiner.answer != nil {
		t.Error("a failed leader's joiners got an answer")
	}
	if _, leader := f.lead("failed"); !leader {
		t.Error("after a failed flight, a LIST joins it")
	}
}

// A joiner reserves half of what its answer's LIST took: answers larger
// than the budget too, which the LIST itself took alone.
func TestJoinerCost(t *testing.T) {
	for _, c := range []struct{ objects, capacity, want int }{
		{5000, 5000, 2500},
		{15000, 5000, 2500},
		{400, 5000, 200},
		{3, 5000, 1},
		{0, 5000, 1},
	} {
		if got := (&sharedAnswer{objects: c.objects}).joinerCost(c.capacity); got != c.want {
			t.Errorf("%d objects, budget %d: %d, want %d", c.objects, c.capacity, got, c.want)
		}
	}
}
