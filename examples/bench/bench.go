package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// rawPrefix keeps the raw-etcd baseline's keys apart from the cache's.
const rawPrefix = "/bench-raw"

// rawTxnPrefix keeps the raw create transactions' keys apart from both.
const rawTxnPrefix = "/bench-raw-txn"

var (
	everything = kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}
	warmup     = kcpcache.Scope{Shard: "warmup", Cluster: "warmup"}
)

type clientKey struct {
	scope  kcpcache.Scope
	noGzip bool
}

// listResult holds the "*/*" list measurements at one data-set size: wall
// time and process CPU time of each kind of read.
type listResult struct {
	cache, body, bodyNoGzip, etcd, etcdRaw                summary
	cacheCPU, bodyCPU, bodyNoGzipCPU, etcdCPU, etcdRawCPU summary
	bytesPerObject                                        float64 // average stored (etcd value) size
	bodyBytes, bodyBytesNoGzip                            int     // response body size (decompressed)
	// At the full size only (listCheckpoint): the same number of bytes as
	// the uncompressed body over loopback TLS; the dynamic client's LIST
	// and the body alone in CBOR, when the cache serves it.
	wire, wireCPU                                summary
	wireSuite                                    string
	wireBytes                                    int
	cborServed                                   bool
	cborList, cborListCPU, cborBody, cborBodyCPU summary
	cborBodyBytes                                int
}

type bench struct {
	cfg     config
	srv     *benchServer
	l       layout
	rep     *report
	profile *os.File

	httpClient, noGzipClient *http.Client

	mu      sync.Mutex
	clients map[clientKey]dynamic.ResourceInterface

	lists      map[int]listResult
	cpuByPhase map[string]cpuUse
}

func newBench(cfg config, srv *benchServer, rep *report, profile *os.File) (*bench, error) {
	h, err := rest.HTTPClientFor(srv.admin)
	if err != nil {
		return nil, err
	}
	noGzip := rest.CopyConfig(srv.admin)
	noGzip.DisableCompression = true
	hn, err := rest.HTTPClientFor(noGzip)
	if err != nil {
		return nil, err
	}
	return &bench{
		cfg: cfg, srv: srv, rep: rep, profile: profile,
		l:          layout{shards: cfg.shards, clusters: cfg.clusters},
		httpClient: h, noGzipClient: hn,
		clients: map[clientKey]dynamic.ResourceInterface{},
		lists:   map[int]listResult{},

		cpuByPhase: map[string]cpuUse{},
	}, nil
}

// resource is a dynamic client for apiexports in scope s; all scopes share
// one HTTP client (one HTTP/2 connection), as the clients of one process do.
// noGzip turns off client-go's default Accept-Encoding: gzip.
func (b *bench) resource(s kcpcache.Scope, noGzip bool) (dynamic.ResourceInterface, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := clientKey{s, noGzip}
	if r, ok := b.clients[k]; ok {
		return r, nil
	}
	cfg := rest.CopyConfig(b.srv.admin)
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(s))
	h := b.httpClient
	if noGzip {
		cfg.DisableCompression = true
		h = b.noGzipClient
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, h)
	if err != nil {
		return nil, err
	}
	r := dc.Resource(apiExports)
	b.clients[k] = r
	return r, nil
}

func (b *bench) run(ctx context.Context) error {
	return profilePhase(b.cfg, b.profile, "all", func() error { return b.runPhases(ctx) })
}

func (b *bench) runPhases(ctx context.Context) error {
	if err := b.phase(ctx, "warm-up", b.warmUp); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"load", b.loadAndList},
		{"get", b.getByName},
		{"scoped", b.scopedLists},
		{"watch", b.watchFanOut},
		{"create", b.createThroughput},
		{"churn", b.churn},
		{"storm", b.listStorm},
		{"regions", b.regions},
		{"relays", b.relays},
	}
	for _, s := range steps {
		if s.name == "churn" && b.cfg.churnObjects == 0 || !b.cfg.phases[s.name] {
			continue
		}
		fn := s.fn
		if err := profilePhase(b.cfg, b.profile, s.name, func() error { return b.phase(ctx, s.name, fn) }); err != nil {
			return err
		}
	}
	b.replicationPlaceholder()
	b.notes()
	return nil
}

func (b *bench) phase(ctx context.Context, name string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.phaseTimeout)
	defer cancel()
	start := time.Now()
	progress("phase %s", name)
	c0 := sampleCPU()
	err := fn(ctx)
	use := cpuBetween(c0, sampleCPU(), runtime.NumCPU())
	if err != nil {
		return fmt.Errorf("phase %s: %w", name, err)
	}
	progress("phase %s done in %s; %s", name, time.Since(start).Round(time.Millisecond), use)
	if name != "warm-up" {
		b.cpuByPhase[name] = use
	}
	return nil
}

// warmUp opens connections and exercises every code path once, in a
// partition of its own that it empties again.
func (b *bench) warmUp(ctx context.Context) error {
	r, err := b.resource(warmup, false)
	if err != nil {
		return err
	}
	const n = 20
	for i := 0; i < n; i++ {
		obj, err := b.object(objectName("warmup", i))
		if err != nil {
			return err
		}
		if _, err := r.Create(ctx, obj, createOptions); err != nil {
			return err
		}
		key := rawPrefix + etcdKey(b.srv.etcdPrefix, warmup, obj.GetName())
		if _, err := b.srv.etcd.Put(ctx, key, "{}"); err != nil {
			return err
		}
		if _, err := b.srv.etcd.Get(ctx, key); err != nil {
			return err
		}
	}
	// A consistent list waits for the watch cache to catch up; a GET with
	// resourceVersion=0 may be served from an older state.
	if _, err := r.List(ctx, listConsistent); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := r.Get(ctx, objectName("warmup", i), getFromCache); err != nil {
			return err
		}
		if _, err := r.Get(ctx, objectName("warmup", i), getConsistent); err != nil {
			return err
		}
	}
	for _, noGzip := range []bool{false, true} {
		all, err := b.resource(everything, noGzip)
		if err != nil {
			return err
		}
		for i := 0; i < 3; i++ {
			if _, err := all.List(ctx, listConsistent); err != nil {
				return err
			}
		}
	}
	if _, _, err := b.etcdRange(ctx, resourceKeyPrefix(b.srv.etcdPrefix)); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := r.Delete(ctx, objectName("warmup", i), deleteOptions); err != nil {
			return err
		}
	}
	if _, err := b.srv.etcd.Delete(ctx, rawPrefix+"/", clientv3.WithPrefix()); err != nil {
		return err
	}
	return nil
}

// object is an object of the data set, with managedFields when the
// benchmark runs with -managed-fields.
func (b *bench) object(name string) (*unstructured.Unstructured, error) {
	if b.cfg.managedFields {
		return ownedAPIExport(name, b.cfg.objectBytes)
	}
	return apiExport(name, b.cfg.objectBytes)
}

// create creates objects [from, to) named prefix-NNNNN in their partitions
// with conc concurrent workers and returns the wall time of the creates alone.
func (b *bench) create(ctx context.Context, prefix string, from, to, conc int) (time.Duration, error) {
	type job struct {
		r   dynamic.ResourceInterface
		obj *unstructured.Unstructured
	}
	jobs := make([]job, 0, to-from)
	for i := from; i < to; i++ {
		r, err := b.resource(b.l.scopeOf(i), false)
		if err != nil {
			return 0, err
		}
		obj, err := b.object(objectName(prefix, i))
		if err != nil {
			return 0, err
		}
		jobs = append(jobs, job{r, obj})
	}
	var next atomic.Int64
	start := time.Now()
	err := parallel(conc, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(jobs) {
				return nil
			}
			if _, err := jobs[i].r.Create(ctx, jobs[i].obj, createOptions); err != nil {
				return fmt.Errorf("creating %s in %s: %w", jobs[i].obj.GetName(), b.l.scopeOf(from+i), err)
			}
		}
	})
	return time.Since(start), err
}

// parallel runs n copies of fn and returns the first error.
func parallel(n int, fn func() error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// etcdRange is the baseline of a LIST: one linearizable range read of a key
// prefix with clientv3, then every value decoded from JSON into an
// unstructured object, as the dynamic client decodes a list's items.
// It also returns the total size of the values.
func (b *bench) etcdRange(ctx context.Context, prefix string) ([]unstructured.Unstructured, int, error) {
	resp, err := b.srv.etcd.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	items := make([]unstructured.Unstructured, len(resp.Kvs))
	total := 0
	for i, kv := range resp.Kvs {
		total += len(kv.Value)
		if err := items[i].UnmarshalJSON(kv.Value); err != nil {
			return nil, 0, fmt.Errorf("decoding %s: %w", kv.Key, err)
		}
	}
	return items, total, nil
}

// timed runs fn after a full garbage collection, so that each measured
// operation pays for its own garbage and not for its predecessor's: client
// and server share this process. It returns the wall time and the process
// CPU time fn took.
func timed(fn func() error) (time.Duration, time.Duration, error) {
	runtime.GC()
	cpu := processCPU()
	start := time.Now()
	err := fn()
	return time.Since(start), processCPU() - cpu, err
}

func newGet(ctx context.Context, url string) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
}
