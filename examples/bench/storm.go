package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// listStorm measures fairness and memory under a storm of large LISTs, the
// case of issue 20: GETs of single objects alone, then the same GETs while
// -storm-lists clients run consistent "*/*" LISTs of the whole data set back
// to back; the process's RSS before, at its peak and -storm-after later; and
// the LISTs' throughput against one LIST at a time alone.
//
// Every client has a connection of its own, as separate shards and
// controllers do: on one shared HTTP/2 connection a GET's response would
// queue behind the LISTs' bodies in the client's own flow control, which
// says nothing about the server. By default (-storm-fresh-tls) every LIST
// dials and handshakes a connection of its own, as short-lived clients do,
// so that handshakes are part of the storm. Bodies are read as bytes, so
// that client decoding does not compete with the server for CPU more than
// reading does.
func (b *bench) listStorm(ctx context.Context) error {
	if b.cfg.stormServerBinary == "" {
		return b.listStormOn(ctx, readMemory, "the whole process (server, embedded etcd, the storm's clients)")
	}
	root, err := os.MkdirTemp("", "kcp-cache-storm-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(root) }()
	s, err := startScaleServer(ctx, "storm", b.cfg.stormServerBinary, root, 0, false, b.cfg.serverFlags...)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return fmt.Errorf("starting %s: %w\n%s", b.cfg.stormServerBinary, err, tail(s.log.String(), 2000))
	}
	own, err := newBench(b.cfg, &benchServer{admin: s.cfg}, b.rep, nil)
	if err != nil {
		return err
	}
	// Loaded here whatever the phases: the load phase loaded the bench's
	// own server.
	own.cfg.phases = map[string]bool{"storm": true}
	return own.listStormOn(ctx, func() memoryNow {
		rss, _ := s.rss()
		return memoryNow{rss: rss}
	}, "the server's process alone (its embedded etcd included; live heap not sampled)")
}

// listStormOn runs the storm against b's server, whose memory readMemory
// reads (of what: whose).
func (b *bench) listStormOn(ctx context.Context, readMemory func() memoryNow, whose string) error {
	n := b.cfg.objects
	if !b.cfg.phases["load"] {
		n = b.cfg.stormObjects
		progress("loading %d objects for the storm", n)
		if _, err := b.create(ctx, "export", 0, n, b.cfg.loadConcurrency); err != nil {
			return err
		}
	}
	listURL := kcpcache.JoinHostPath(b.srv.admin.Host, kcpcache.ScopedPath(everything, "/apis/"+apiExports.Group+"/"+apiExports.Version+"/"+apiExports.Resource))
	getURL := func(i int) string {
		return kcpcache.JoinHostPath(b.srv.admin.Host, kcpcache.ScopedPath(b.l.scopeOf(i), "/apis/"+apiExports.Group+"/"+apiExports.Version+"/"+apiExports.Resource+"/"+objectName("export", i)))
	}
	getter, err := b.ownConnection()
	if err != nil {
		return err
	}

	// One LIST at a time, alone: the throughput a storm is compared with.
	var alone []time.Duration
	bodyBytes := 0
	for i := 0; i < 5; i++ {
		start := time.Now()
		got, _, err := readStatus(ctx, getter, listURL)
		if err != nil {
			return err
		}
		alone = append(alone, time.Since(start))
		bodyBytes = got
	}
	aloneList := summarize(alone)

	progress("GETs alone for %s", b.cfg.stormGetsFor)
	baseline, err := b.getLoop(ctx, getter, getURL, n, b.cfg.stormGetsFor)
	if err != nil {
		return err
	}

	before := readMemory()
	peak := newPeakMemory(before)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		peak.sample(sampleCtx, 100*time.Millisecond, readMemory)
	}()

	progress("storm: %d concurrent */* LISTs of %d objects for %s, GETs meanwhile", b.cfg.stormLists, n, b.cfg.stormDuration)
	stormCtx, stopStorm := context.WithCancel(ctx)
	var lists, tooMany, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	var dials atomic.Int64
	listers := make([]*http.Client, b.cfg.stormLists)
	for i := range listers {
		if listers[i], err = b.countedConnection(&dials, b.cfg.stormFreshTLS); err != nil {
			stopStorm()
			stopSampling()
			return err
		}
	}
	stormStart := time.Now()
	for _, h := range listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer h.CloseIdleConnections()
			for stormCtx.Err() == nil {
				_, retryAfter, err := readStatus(stormCtx, h, listURL)
				var tm *tooManyRequests
				switch {
				case err == nil:
					lists.Add(1)
				case errors.As(err, &tm):
					tooMany.Add(1)
					select {
					case <-stormCtx.Done():
					case <-time.After(retryAfter):
					}
				case stormCtx.Err() != nil:
				default:
					// A connection that broke (on a starved machine the
					// server closes connections whose client is slow to
					// start HTTP/2): retried on a new one, as clients do.
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
					h.CloseIdleConnections()
				}
			}
		}()
	}
	profiled := make(chan error, 1)
	if b.cfg.stormHeapProfile != "" {
		go func() {
			select {
			case <-stormCtx.Done():
				profiled <- nil
			case <-time.After(b.cfg.stormDuration * 3 / 4):
				profiled <- writeHeapProfile(b.cfg.stormHeapProfile)
			}
		}()
	} else {
		profiled <- nil
	}
	during, getErr := b.getLoop(ctx, getter, getURL, n, b.cfg.stormDuration)
	stormTime := time.Since(stormStart)
	stopStorm()
	wg.Wait()
	if err := <-profiled; err != nil {
		stopSampling()
		return err
	}
	stormEnd := readMemory()
	if getErr != nil {
		stopSampling()
		return getErr
	}
	if lists.Load() == 0 {
		stopSampling()
		return fmt.Errorf("no storm LIST succeeded; first error: %v", firstErr)
	}

	progress("storm over (%d LISTs, %d answered 429, %d failed); waiting %s for memory to come back", lists.Load(), tooMany.Load(), failed.Load(), b.cfg.stormAfter)
	select {
	case <-ctx.Done():
	case <-time.After(b.cfg.stormAfter):
	}
	stopSampling()
	<-sampled
	after := readMemory()
	high := peak.get()

	limit := 100 * time.Millisecond
	b.rep.add(&row{
		ID: "9a", Metric: fmt.Sprintf("GET p99 during %d concurrent */* LISTs of %d objects", b.cfg.stormLists, n),
		Cache: p50p99(during), Baseline: p50p99(baseline) + " alone",
		CacheValue: during.P99.Seconds(), BaselineValue: baseline.P99.Seconds(), Unit: "s",
		Ratio:        ratio(float64(during.P99), float64(baseline.P99)),
		RatioMeaning: fmt.Sprintf("p99 of a consistent GET of one object during the storm ÷ p99 alone, just before (%d vs %d GETs, max %s vs %s); each client on its own connection", during.N, baseline.N, ms(during.Max), ms(baseline.Max)),
		Target:       &target{Text: "p99 ≤ 100 ms", AtMost: true, Bound: limit.Seconds()}, TargetOnValue: true,
		Details: map[string]interface{}{"during": during, "alone": baseline},
	})
	b.rep.add(&row{
		ID: "9b", Metric: "  RSS at the storm's peak",
		Cache: mib(high.rss), Baseline: mib(before.rss) + " before",
		CacheValue: float64(high.rss), BaselineValue: float64(before.rss), Unit: "bytes",
		Ratio:        ratio(float64(high.rss), float64(before.rss)),
		RatioMeaning: fmt.Sprintf("peak VmRSS of %s, sampled every 100 ms, ÷ VmRSS just before; live heap objects %s before, %s at the peak", whose, mib(before.heap), mib(high.heap)),
		Target:       &target{Text: "≤ 2×", AtMost: true, Bound: 2},
		Details:      map[string]interface{}{"before": before, "peak": high, "storm_end": stormEnd},
	})
	b.rep.add(&row{
		ID: "9c", Metric: fmt.Sprintf("  RSS %s after the storm", b.cfg.stormAfter),
		Cache: mib(after.rss), Baseline: mib(before.rss) + " before",
		CacheValue: float64(after.rss), BaselineValue: float64(before.rss), Unit: "bytes",
		Ratio:        ratio(float64(after.rss), float64(before.rss)),
		RatioMeaning: fmt.Sprintf("VmRSS %s after the last LIST ended ÷ before (at the storm's end %s); live heap objects %s", b.cfg.stormAfter, mib(stormEnd.rss), mib(after.heap)),
		Details:      map[string]interface{}{"after": after},
	})
	throughput := perSecond(int(lists.Load()), stormTime)
	aloneRate := 1 / aloneList.P50.Seconds()
	b.rep.add(&row{
		ID: "9d", Metric: "  LIST throughput during the storm",
		Cache: fmt.Sprintf("%.1f LISTs/s", throughput), Baseline: fmt.Sprintf("%.1f LISTs/s one at a time", aloneRate),
		CacheValue: throughput, BaselineValue: aloneRate, Unit: "lists/s",
		Ratio:        ratio(throughput, aloneRate),
		RatioMeaning: fmt.Sprintf("completed */* LISTs per second of the storm (%d in %s, %.0f MB/s of JSON; %d answered 429 and retried after Retry-After; %d failed on their connection and retried; %d TLS connections dialed, fresh per LIST: %t) ÷ one LIST at a time alone (p50 %s, %.1f MB)", lists.Load(), stormTime.Round(time.Millisecond), throughput*float64(bodyBytes)/1e6, tooMany.Load(), failed.Load(), dials.Load(), b.cfg.stormFreshTLS, ms(aloneList.P50), float64(bodyBytes)/1e6),
		Details:      map[string]interface{}{"lists": lists.Load(), "too_many_requests": tooMany.Load(), "failed": failed.Load(), "first_failure": fmt.Sprint(firstErr), "alone": aloneList, "body_bytes": bodyBytes, "dials": dials.Load(), "fresh_tls": b.cfg.stormFreshTLS},
	})
	return nil
}

// getLoop GETs random objects of the data set one after another for d and
// returns their latencies.
func (b *bench) getLoop(ctx context.Context, h *http.Client, url func(int) string, n int, d time.Duration) (summary, error) {
	var samples []time.Duration
	deadline := time.Now().Add(d)
	for i := 0; time.Now().Before(deadline); i++ {
		idx := (i * 7919) % n
		start := time.Now()
		if _, _, err := readStatus(ctx, h, url(idx)); err != nil {
			return summary{}, fmt.Errorf("GET during the storm: %w", err)
		}
		samples = append(samples, time.Since(start))
	}
	return summarize(samples), nil
}

// ownConnection is an admin HTTP client with a connection of its own:
// client-go shares one transport among equal configurations, but never one
// with a custom dialer.
func (b *bench) ownConnection() (*http.Client, error) {
	return b.countedConnection(nil, false)
}

// countedConnection is ownConnection counting its dials in dials, if not
// nil; with singleUse every request dials and handshakes a connection of
// its own, closed after its answer.
func (b *bench) countedConnection(dials *atomic.Int64, singleUse bool) (*http.Client, error) {
	cfg := rest.CopyConfig(b.srv.admin)
	dial := (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		return dial(ctx, network, address)
	}
	h, err := rest.HTTPClientFor(cfg)
	if err != nil || !singleUse {
		return h, err
	}
	// client-go wraps its transport (user agent, authentication); the
	// innermost one is net/http's, whose connections, HTTP/2 ones too,
	// serve a single request when keep-alives are off. client-go keeps no
	// TLS session cache, so each handshake is a full one.
	rt := h.Transport
	for {
		if t, ok := rt.(*http.Transport); ok {
			t.DisableKeepAlives = true
			return h, nil
		}
		w, ok := rt.(utilnet.RoundTripperWrapper)
		if !ok {
			return nil, fmt.Errorf("no net/http transport under client-go's %T", rt)
		}
		rt = w.WrappedRoundTripper()
	}
}

// tooManyRequests is a 429 answer.
type tooManyRequests struct{ retryAfter time.Duration }

func (e *tooManyRequests) Error() string {
	return fmt.Sprintf("429 Too Many Requests, retry after %s", e.retryAfter)
}

// readStatus GETs url and reads the body; it returns the body's size, and a
// *tooManyRequests error for a 429.
func readStatus(ctx context.Context, h *http.Client, url string) (int, time.Duration, error) {
	req, err := newGet(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, 0, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return int(n), 0, nil
	case http.StatusTooManyRequests:
		wait := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return 0, wait, &tooManyRequests{retryAfter: wait}
	}
	return 0, 0, fmt.Errorf("GET %s: %s", url, resp.Status)
}

// memoryNow is the process's resident memory and live heap objects.
type memoryNow struct {
	rss  uint64
	heap uint64
}

func (m memoryNow) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"vm_rss_bytes":%d,"heap_objects_bytes":%d}`, m.rss, m.heap)), nil
}

// readMemory reads VmRSS and the heap without stopping the world (unlike
// runtime.ReadMemStats), so that sampling does not slow what it measures.
func readMemory() memoryNow {
	var m memoryNow
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		m.rss = parseProcStatus(status)["VmRSS"]
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		m.heap = s[0].Value.Uint64()
	}
	return m
}

// peakMemory keeps the highest RSS and heap sampled.
type peakMemory struct {
	mu   sync.Mutex
	high memoryNow
}

func newPeakMemory(start memoryNow) *peakMemory { return &peakMemory{high: start} }

func (p *peakMemory) sample(ctx context.Context, every time.Duration, read func() memoryNow) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m := read()
		p.mu.Lock()
		p.high.rss, p.high.heap = max(p.high.rss, m.rss), max(p.high.heap, m.heap)
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *peakMemory) get() memoryNow {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.high
}
