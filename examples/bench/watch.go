package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	writerWorkers   = 16
	deliveryTimeout = 15 * time.Second
)

// watcherState is owned by one watcher goroutine until it ends.
type watcherState struct {
	latencies []time.Duration
	seen      []bool
	err       error
}

// record notes the delivery of update seq, sent at sentAt and received at
// now (both relative to the same base); false for duplicates and strangers.
func (st *watcherState) record(seq, sentAt int64, now time.Duration) bool {
	if seq < 0 || int(seq) >= len(st.seen) || st.seen[seq] {
		return false
	}
	st.seen[seq] = true
	st.latencies = append(st.latencies, now-time.Duration(sentAt))
	return true
}

// watchMode is how the watchers read their streams.
type watchMode struct {
	id, name string
	// raw reads the HTTP stream and extracts only the benchmark's fields,
	// instead of decoding every event with client-go.
	raw bool
}

// watchFanOut runs the fan-out measurement twice: with client-go dynamic
// watchers (what the target is about), and with watchers that read the raw
// stream, which shows what the server delivers when the watchers' own JSON
// decoding does not compete with it for the same CPUs.
func (b *bench) watchFanOut(ctx context.Context) error {
	for i, m := range []watchMode{
		{id: "5a", name: "client-go dynamic watchers"},
		{id: "5b", name: "raw-stream watchers", raw: true},
	} {
		if err := b.watchOnce(ctx, m, i); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// watchOnce starts the */* watchers, has a writer patch objects at a fixed
// rate with the send time in the spec, and measures how long each update
// takes to reach each watcher (send to decoded event, against one monotonic
// clock in this process).
func (b *bench) watchOnce(ctx context.Context, mode watchMode, round int) error {
	maxWrites := int(float64(b.cfg.rate) * b.cfg.duration.Seconds())
	all, err := b.resource(everything, false)
	if err != nil {
		return err
	}
	// Start every watcher at the current resourceVersion, so that no
	// watcher replays the existing objects.
	l, err := all.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	rv := l.GetResourceVersion()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	states := make([]*watcherState, b.cfg.watchers)
	var delivered atomic.Int64
	var wg sync.WaitGroup
	base := time.Now()
	progress("starting %d */* %s at resourceVersion %s", b.cfg.watchers, mode.name, rv)
	for i := range states {
		st := &watcherState{seen: make([]bool, maxWrites)}
		states[i] = st
		var run func()
		if mode.raw {
			body, err := b.startRawWatcher(wctx, rv)
			if err != nil {
				return fmt.Errorf("starting watcher %d: %w", i, err)
			}
			run = func() { defer body.Close(); st.readRaw(wctx, body, base, &delivered) }
		} else {
			w, err := b.startWatcher(wctx, rv)
			if err != nil {
				return fmt.Errorf("starting watcher %d: %w", i, err)
			}
			run = func() { defer w.Stop(); st.readEvents(wctx, w, base, &delivered) }
		}
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}

	progress("writing %d updates/s for %s", b.cfg.rate, b.cfg.duration)
	c0 := sampleCPU()
	writes, writeLat, skipped, elapsed, err := b.writeAtRate(ctx, base, maxWrites, round)
	if err != nil {
		return err
	}
	want := int64(writes) * int64(b.cfg.watchers)
	deadline := time.Now().Add(deliveryTimeout)
	for delivered.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	use := cpuBetween(c0, sampleCPU(), runtime.NumCPU())
	cancel()
	wg.Wait()

	var lat []time.Duration
	var watchErrs int
	var firstErr error
	for _, st := range states {
		lat = append(lat, st.latencies...)
		if st.err != nil {
			watchErrs++
			if firstErr == nil {
				firstErr = st.err
			}
		}
	}
	s, ws := summarize(lat), summarize(writeLat)
	note := fmt.Sprintf("%d of %d deliveries (%d updates × %d watchers) arrived; %s", len(lat), want, writes, b.cfg.watchers, use)
	if watchErrs > 0 {
		note += fmt.Sprintf("; %d watchers failed, first: %v", watchErrs, firstErr)
	}
	x := &row{
		ID: mode.id, Metric: fmt.Sprintf("watch delivery, %d */* %s, %.0f updates/s", b.cfg.watchers, mode.name, perSecond(writes, elapsed)),
		Cache: p50p99(s), Baseline: p50p99(ws) + " write",
		CacheValue: s.P99.Seconds(), BaselineValue: ws.P99.Seconds(), Unit: "s",
		Ratio:        ratio(float64(s.P99), float64(ws.P99)),
		RatioMeaning: fmt.Sprintf("p99 of send→receipt (includes the write) ÷ p99 of the write request alone; max %s; %d of %d ticks skipped because %d writers were busy", ms(s.Max), skipped, skipped+writes, writerWorkers),
		Note:         note,
		Details: map[string]interface{}{"delivery": s, "write": ws, "writes": writes, "skipped": skipped,
			"expected_deliveries": want, "deliveries": len(lat), "cpu": use},
	}
	if !mode.raw {
		x.Target = &target{Text: "p99 ≤ 50 ms", AtMost: true, Bound: 0.050}
		x.TargetOnValue, x.Indicative = true, b.cfg.watchers != 100
	}
	b.rep.add(x)
	if x.Target != nil && int64(len(lat)) < want {
		met := false
		x.Met = &met // a lost event fails the target whatever the latency
	}
	return nil
}

// readEvents consumes a client-go watch.
func (st *watcherState) readEvents(ctx context.Context, w watch.Interface, base time.Time, delivered *atomic.Int64) {
	for ev := range w.ResultChan() {
		now := time.Since(base)
		switch ev.Type {
		case watch.Modified:
		case watch.Error:
			if ctx.Err() == nil {
				st.err = fmt.Errorf("watch error: %v", ev.Object)
			}
			return
		default:
			continue
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		seq, found1, _ := unstructured.NestedInt64(u.Object, "spec", "benchSeq")
		sent, found2, _ := unstructured.NestedInt64(u.Object, "spec", "benchSentAt")
		if found1 && found2 && st.record(seq, sent, now) {
			delivered.Add(1)
		}
	}
}

// readRaw consumes a JSON watch stream (one event per line) and extracts
// only the benchmark's fields from MODIFIED events.
func (st *watcherState) readRaw(ctx context.Context, body io.Reader, base time.Time, delivered *atomic.Int64) {
	r := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		now := time.Since(base)
		if err != nil {
			if ctx.Err() == nil && err != io.EOF {
				st.err = err
			}
			return
		}
		if !bytes.HasPrefix(line, []byte(`{"type":"MODIFIED"`)) {
			if bytes.HasPrefix(line, []byte(`{"type":"ERROR"`)) && ctx.Err() == nil {
				st.err = fmt.Errorf("watch error: %s", line)
				return
			}
			continue
		}
		seq, ok1 := intField(line, `"benchSeq":`)
		sent, ok2 := intField(line, `"benchSentAt":`)
		if ok1 && ok2 && st.record(seq, sent, now) {
			delivered.Add(1)
		}
	}
}

// intField finds `name` in line and parses the integer after it.
func intField(line []byte, name string) (int64, bool) {
	i := bytes.Index(line, []byte(name))
	if i < 0 {
		return 0, false
	}
	rest := line[i+len(name):]
	j := 0
	for j < len(rest) && (rest[j] == '-' || rest[j] >= '0' && rest[j] <= '9') {
		j++
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// watcherConfig is the admin configuration for */*, on a connection of its
// own unless -watch-shared-conn: a custom dialer keeps client-go from
// sharing a cached transport.
func (b *bench) watcherConfig() *rest.Config {
	cfg := rest.CopyConfig(b.srv.admin)
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(everything))
	if !b.cfg.watchSharedConn {
		cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return cfg
}

// startWatcher opens one */* watch with the client-go dynamic client.
func (b *bench) startWatcher(ctx context.Context, rv string) (watch.Interface, error) {
	var r dynamic.ResourceInterface
	if b.cfg.watchSharedConn {
		var err error
		if r, err = b.resource(everything, false); err != nil {
			return nil, err
		}
	} else {
		dc, err := dynamic.NewForConfig(b.watcherConfig())
		if err != nil {
			return nil, err
		}
		r = dc.Resource(apiExports)
	}
	return r.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
}

// startRawWatcher opens one */* watch as a plain HTTP stream.
func (b *bench) startRawWatcher(ctx context.Context, rv string) (io.ReadCloser, error) {
	h := b.httpClient
	if !b.cfg.watchSharedConn {
		var err error
		if h, err = rest.HTTPClientFor(b.watcherConfig()); err != nil {
			return nil, err
		}
	}
	url := kcpcache.JoinHostPath(b.srv.admin.Host, kcpcache.ScopedPath(everything, "/apis/"+apiExports.Group+"/"+apiExports.Version+"/"+apiExports.Resource)) +
		"?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv
	req, err := newGet(ctx, url)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := h.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("watch: %s", resp.Status)
	}
	return resp.Body, nil
}

// writeAtRate patches up to maxWrites objects, one per tick at the
// configured rate, through a bounded pool of writers; a tick that finds every
// writer busy is skipped and counted. It returns the writes that succeeded.
// Each round patches other objects than the previous one.
func (b *bench) writeAtRate(ctx context.Context, base time.Time, maxWrites, round int) (int, []time.Duration, int, time.Duration, error) {
	type result struct {
		lat time.Duration
		err error
	}
	jobs := make(chan int, writerWorkers)
	results := make(chan result, maxWrites)
	var wg sync.WaitGroup
	for i := 0; i < writerWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				idx := (round*maxWrites + seq) % b.cfg.objects
				r, err := b.resource(b.l.scopeOf(idx), false)
				if err != nil {
					results <- result{err: err}
					continue
				}
				sentAt := time.Since(base)
				patch := fmt.Sprintf(`{"spec":{"benchSeq":%d,"benchSentAt":%d}}`, seq, int64(sentAt))
				_, err = r.Patch(ctx, objectName("export", idx), types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench"})
				results <- result{lat: time.Since(base) - sentAt, err: err}
			}
		}()
	}
	ticker := time.NewTicker(time.Second / time.Duration(b.cfg.rate))
	start := time.Now()
	stop := start.Add(b.cfg.duration)
	skipped := 0
loop:
	for seq := 0; seq < maxWrites && time.Now().Before(stop); seq++ {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
		}
		select {
		case jobs <- seq:
		default:
			skipped++
		}
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	close(results)
	var lat []time.Duration
	var firstErr error
	for r := range results {
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		lat = append(lat, r.lat)
	}
	if firstErr != nil {
		return 0, nil, 0, 0, fmt.Errorf("writer: %w", firstErr)
	}
	return len(lat), lat, skipped, elapsed, nil
}
