package robustness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// sample is what one process of the soak held at one instant: read from
// its own /metrics and heap profile (each cache runs in a child process of
// the test binary, so the figures are that cache's alone).
type sample struct {
	// at is the time since the soak's start.
	at time.Duration
	// started is process_start_time_seconds: a restarted process is a
	// new incarnation, judged on its own.
	started    float64
	goroutines float64
	fds        float64
	rss        float64
	heapInuse  float64
	// liveHeap is the heap allocated right after a forced collection
	// (HeapAlloc of /debug/pprof/heap?gc=1): what is reachable.
	liveHeap float64
	// db is the size of the process's etcd database
	// (apiserver_storage_size_bytes: etcd's own Status, as the apiserver
	// reads it).
	db float64
	// objects are the objects the process serves, in every partition.
	objects int
}

// sampledProcess is one cache process of the soak and its samples.
type sampledProcess struct {
	name string
	// cfg is the process's admin configuration.
	cfg     *rest.Config
	hc      *http.Client
	host    string
	all     dynamic.ResourceInterface
	samples []sample
}

// newSampledProcess reads the process whose admin configuration is cfg (a
// member process's stays valid across its restarts).
func newSampledProcess(t *testing.T, name string, cfg *rest.Config) *sampledProcess {
	t.Helper()
	admin := rest.CopyConfig(cfg)
	cfg = client.Unthrottled(rest.CopyConfig(cfg))
	cfg.Timeout = 30 * time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	every := rest.CopyConfig(cfg)
	every.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "*", Cluster: "*"})
	d, err := dynamic.NewForConfig(every)
	if err != nil {
		t.Fatal(err)
	}
	return &sampledProcess{name: name, cfg: admin, hc: hc, host: cfg.Host, all: d.Resource(Resource)}
}

// take samples the process now, retrying for up to a minute (a process
// restarted a moment ago may still be starting).
func (p *sampledProcess) take(ctx context.Context, at time.Duration) error {
	var s sample
	err := cachetest.PollWithin(ctx, time.Minute, func(ctx context.Context) error {
		var err error
		s, err = p.read(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("sampling %s: %w", p.name, err)
	}
	s.at = at
	p.samples = append(p.samples, s)
	return nil
}

// read is one sample: the heap profile first, which collects garbage, so
// that the heap and RSS of /metrics after it are those of a collected
// heap too.
func (p *sampledProcess) read(ctx context.Context) (sample, error) {
	var s sample
	profile, err := p.get(ctx, "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return s, err
	}
	stats := memStats(profile)
	var ok bool
	if s.liveHeap, ok = stats["HeapAlloc"]; !ok {
		return s, fmt.Errorf("the heap profile has no HeapAlloc")
	}
	metrics, err := p.get(ctx, "/metrics")
	if err != nil {
		return s, err
	}
	m := parseMetrics(metrics)
	for name, v := range map[string]*float64{
		"go_goroutines":                 &s.goroutines,
		"process_open_fds":              &s.fds,
		"process_resident_memory_bytes": &s.rss,
		"go_memstats_heap_inuse_bytes":  &s.heapInuse,
		"process_start_time_seconds":    &s.started,
		"apiserver_storage_size_bytes":  &s.db,
	} {
		got, ok := m[name]
		if !ok {
			return s, fmt.Errorf("/metrics has no %s", name)
		}
		*v = got
	}
	list, err := p.all.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return s, fmt.Errorf("listing every partition: %w", err)
	}
	s.objects = len(list.Items)
	return s, nil
}

func (p *sampledProcess) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return b, nil
}

// memStats are the runtime.MemStats lines ("# HeapAlloc = 123") that end a
// heap profile with debug=1.
func memStats(profile []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(profile))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// parseMetrics reads Prometheus' text format: each metric's value, the
// largest of its series when it has several (the database size is one per
// etcd endpoint of the process, and every one is the same etcd).
func parseMetrics(text []byte) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		rest := line[len(name):]
		if i := strings.LastIndex(rest, "}"); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		if old, ok := out[name]; !ok || v > old {
			out[name] = v
		}
	}
	return out
}

// The leak check's allowances. A process's figures move with what is
// under way when it is sampled (requests, watches, the collector's
// pacing) and with the data it holds; a leak grows with time and
// traffic, without bound. The growth allowed from an incarnation's second
// sample to its last is a small fixed part, a share of the baseline, and,
// for memory and the database, a budget per object added meanwhile (the
// data's own growth: each object is held by etcd, the watch cache and the
// mirrors' stores).
const (
	goroutineSlack  = 50
	fdSlack         = 20
	countShare      = 0.10
	heapSlack       = 32 << 20
	heapShare       = 0.15
	heapPerObject   = 32 << 10
	rssSlack        = 96 << 20
	rssShare        = 0.25
	rssPerObject    = 64 << 10
	dbSlack         = 32 << 20
	dbShare         = 0.50
	dbPerObject     = 32 << 10
	minLeakSamples  = 3
	mib             = 1 << 20
	leakCheckPrefix = "leak-"
)

// judgeLeaks checks each incarnation of a process (samples with the same
// start time) from its second sample to its last: the first is taken
// while a process warms up (caches filling, connections opening). An
// incarnation with fewer than minLeakSamples samples has too short a span
// to judge and is skipped.
func judgeLeaks(name string, samples []sample) (out []Violation, judged int) {
	for start := 0; start < len(samples); {
		end := start
		for end < len(samples) && samples[end].started == samples[start].started {
			end++
		}
		inc := samples[start:end]
		start = end
		if len(inc) < minLeakSamples {
			continue
		}
		judged++
		base, last := inc[1], inc[len(inc)-1]
		grown := float64(max(0, last.objects-base.objects))
		span := fmt.Sprintf("%s (incarnation first sampled at %s, from %s to %s, %d to %d objects)", name, inc[0].at.Round(time.Second), base.at.Round(time.Second), last.at.Round(time.Second), base.objects, last.objects)
		check := func(what string, from, to, allowed float64, unit float64, unitName string) {
			if to-from > allowed {
				out = append(out, Violation{Check: leakCheckPrefix + what, Details: fmt.Sprintf("%s: %s grew from %.0f%s to %.0f%s, more than the %.0f%s allowed", span, what, from/unit, unitName, to/unit, unitName, allowed/unit, unitName)})
			}
		}
		check("goroutines", base.goroutines, last.goroutines, goroutineSlack+countShare*base.goroutines, 1, "")
		check("fds", base.fds, last.fds, fdSlack+countShare*base.fds, 1, "")
		check("live-heap", base.liveHeap, last.liveHeap, heapSlack+heapShare*base.liveHeap+heapPerObject*grown, mib, " MiB")
		dbGrown := max(0, last.db-base.db)
		// An in-memory etcd's database is in the process's memory.
		check("rss", base.rss, last.rss, rssSlack+rssShare*base.rss+rssPerObject*grown+dbGrown, mib, " MiB")
		check("etcd-db", base.db, last.db, dbSlack+dbShare*base.db+dbPerObject*grown, mib, " MiB")
	}
	return out, judged
}

// table renders a process's samples.
func (p *sampledProcess) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n  %8s %5s %10s %5s %8s %8s %8s %8s %7s\n", p.name, "t", "inc", "goroutines", "fds", "RSS", "heap", "live", "etcd DB", "objects")
	inc, prev := 0, 0.0
	for i, s := range p.samples {
		if i == 0 || s.started != prev {
			inc++
			prev = s.started
		}
		fmt.Fprintf(&b, "  %8s %5d %10.0f %5.0f %8.1f %8.1f %8.1f %8.1f %7d\n", s.at.Round(time.Second), inc, s.goroutines, s.fds, s.rss/mib, s.heapInuse/mib, s.liveHeap/mib, s.db/mib, s.objects)
	}
	return b.String()
}

// seededLeakEnv, set in a child process of this test binary, makes the
// child leak a goroutine and a file descriptor every 20 ms
// (TestSeededLeakIsCaught). Only this package's TestMain reads it: the
// product has no such switch.
const seededLeakEnv = "KCP_CACHE_TEST_SEEDED_LEAK"

// leakIfAsked starts the seeded leak in a child that was asked for it.
func leakIfAsked() {
	if os.Getenv(seededLeakEnv) == "" {
		return
	}
	go func() {
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		block := make(chan struct{})
		for range ticker.C {
			// Deliberately never closed, never ended: the leak.
			if f, err := os.Open(os.DevNull); err == nil {
				go func() {
					<-block
					_ = f.Close()
				}()
			}
		}
	}()
}

// TestSeededLeakIsCaught: a cache process that leaks a goroutine and a
// file descriptor every 20 ms is named by the soak's leak check, from the
// same samples, over 20 s; the same samples of a process without the leak
// pass it.
func TestSeededLeakIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two cache processes and samples them for 20 s: skipped with -short")
	}
	t.Setenv(seededLeakEnv, "1")
	leaky := cachetest.StartServerProcess(t, "leaky", nil)
	// os.Unsetenv: t.Setenv restores the variable only at the test's end.
	if err := os.Unsetenv(seededLeakEnv); err != nil {
		t.Fatal(err)
	}
	healthy := cachetest.StartServerProcess(t, "healthy", nil)
	var procs []*sampledProcess
	for _, p := range []*cachetest.MemberProcess{leaky, healthy} {
		cfg, err := p.Config()
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, newSampledProcess(t, p.Name, cfg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for i := 0; ; i++ {
		for _, p := range procs {
			if err := p.take(ctx, time.Since(start)); err != nil {
				t.Fatal(err)
			}
		}
		if i == 4 {
			break
		}
		<-ticker.C
	}
	for _, p := range procs {
		t.Log(p.table())
	}
	found, judged := judgeLeaks("leaky", procs[0].samples)
	if judged != 1 {
		t.Fatalf("judged %d incarnations of the leaky process, want 1", judged)
	}
	checks := map[string]bool{}
	for _, v := range found {
		t.Logf("leaky: %s", v)
		checks[v.Check] = true
	}
	for _, want := range []string{leakCheckPrefix + "goroutines", leakCheckPrefix + "fds"} {
		if !checks[want] {
			t.Errorf("the seeded leak was not named %s: %v", want, found)
		}
	}
	if found, _ := judgeLeaks("healthy", procs[1].samples); len(found) > 0 {
		t.Errorf("a process without the leak: %v", found)
	}
}
