package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// SeededFault names a deliberate bug the proxy can switch on, to show that
// the checks catch it. None is ever on unless a test switches it on; the
// proxy exists only in this package's tests.
type SeededFault string

const (
	// StaleConsistentRead answers a consistent read of an object, now and
	// then, with an earlier answer for the same object: the read does not
	// hold every write acknowledged before it was sent.
	StaleConsistentRead SeededFault = "stale-consistent-read"
	// WatchSkipsAnEvent drops the first change of every watch started from
	// a resourceVersion.
	WatchSkipsAnEvent SeededFault = "watch-skips-an-event"
	// WatchReordersEvents delivers a watch's first two changes in reverse
	// order.
	WatchReordersEvents SeededFault = "watch-reorders-events"
	// ReadsFromBeforeAPause answers, once Freeze was called (a member
	// paused), every consistent object read with the member's last answer
	// for the object before the pause: a member that after SIGCONT still
	// trusts what it held, as a leader trusting its lease would.
	ReadsFromBeforeAPause SeededFault = "reads-from-before-a-pause"
	// ConsistentReadWhileCutOff answers a consistent read that the member
	// refused with 503 with its last 200 for the same path instead: a
	// member cut off from its majority serving consistent reads from its
	// watch cache.
	ConsistentReadWhileCutOff SeededFault = "consistent-read-while-cut-off"
	// StaleReadWithoutAge drops Kcp-Cache-Freshness-Age from every answer:
	// a member cut off from its majority that does not say how old its
	// data may be.
	StaleReadWithoutAge SeededFault = "stale-read-without-age"
	// WriteDoneThenRefused forwards every other create, update and patch
	// and, once the cache has stored it, answers 507 InsufficientStorage:
	// a disk guard that refuses a write it has let through.
	WriteDoneThenRefused SeededFault = "write-done-then-refused"
	// RelayServesOldCopy answers every read of an object that the cache
	// answered 200, consistent or with resourceVersion=0, with the body of
	// its first 200 for the object and the headers of the answer it
	// replaces: a relay that serves an old copy as current (the home
	// revision and age of its headers say it holds the latest).
	RelayServesOldCopy SeededFault = "relay-serves-old-copy"
)

// refusedAfterWrite is the answer WriteDoneThenRefused gives a write the
// cache stored.
const refusedAfterWrite = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"InsufficientStorage","code":507,"message":"nothing was written (seeded fault: it was)"}`

// Proxy stands between the clients and the cache: it forwards everything,
// with the identity of its transport, and injects the seeded fault that is
// on.
type Proxy struct {
	URL      string
	listener net.Listener
	server   *http.Server
	fault    atomic.Value // SeededFault
	mu       sync.Mutex
	answers  map[string][]byte // earlier answers of consistent object reads, by path
	// latest are the last 200 answers of consistent reads (of objects
	// and lists), by path; frozen is a copy of them as Freeze found them.
	latest map[string][]byte
	frozen map[string][]byte
	// oldCopies are the first 200 answers of object reads, by path
	// (RelayServesOldCopy).
	oldCopies map[string][]byte
	flip      atomic.Int64

	// upstream is where requests go (Retarget changes it); a request
	// forwarded there ends when the next Retarget cancels gen.
	upstreamMu sync.Mutex
	target     *url.URL
	transport  http.RoundTripper
	gen        context.Context
	cancelGen  context.CancelFunc
}

// NewProxy forwards to target through transport.
func NewProxy(target *url.URL, transport http.RoundTripper) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + l.Addr().String(), listener: l, answers: map[string][]byte{}, latest: map[string][]byte{}, oldCopies: map[string][]byte{}}
	p.fault.Store(SeededFault(""))
	p.Retarget(target, transport)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			target, _, _ := p.upstream()
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			_, transport, _ := p.upstream()
			return transport.RoundTrip(req)
		}),
		FlushInterval:  -1,
		ModifyResponse: p.modify,
	}
	p.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if body, ok := p.staleAnswer(req); ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
			return
		}
		// A request forwarded to the old upstream (a watch) ends at the
		// next Retarget.
		_, _, gen := p.upstream()
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		defer context.AfterFunc(gen, cancel)()
		rp.ServeHTTP(w, req.WithContext(ctx))
	})}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// Retarget sends every request from now on to target through transport,
// and ends the requests forwarded before (a partition's home moved).
func (p *Proxy) Retarget(target *url.URL, transport http.RoundTripper) {
	p.upstreamMu.Lock()
	defer p.upstreamMu.Unlock()
	if p.cancelGen != nil {
		p.cancelGen()
	}
	p.target, p.transport = target, transport
	p.gen, p.cancelGen = context.WithCancel(context.Background())
}

func (p *Proxy) upstream() (*url.URL, http.RoundTripper, context.Context) {
	p.upstreamMu.Lock()
	defer p.upstreamMu.Unlock()
	return p.target, p.transport, p.gen
}

// Enable switches fault on (empty: none).
func (p *Proxy) Enable(fault SeededFault) { p.fault.Store(fault) }

func (p *Proxy) active(f SeededFault) bool { return p.fault.Load().(SeededFault) == f }

// Close stops the proxy.
func (p *Proxy) Close() error {
	err := p.server.Close()
	p.upstreamMu.Lock()
	p.cancelGen()
	p.upstreamMu.Unlock()
	return err
}

// Freeze keeps the last answers of consistent reads as they are now: the
// answers ReadsFromBeforeAPause gives from then on.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = maps.Clone(p.latest)
}

// isConsistentRead: a GET of an object or a list without a resourceVersion.
func isConsistentRead(req *http.Request) bool {
	q := req.URL.Query()
	return req.Method == http.MethodGet && q.Get("watch") == "" && q.Get("resourceVersion") == ""
}

// isObjectWrite: a create, an update or a patch.
func isObjectWrite(req *http.Request) bool {
	return req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch
}

// isConsistentObjectRead: a GET of one object without a resourceVersion.
func isConsistentObjectRead(req *http.Request) bool {
	q := req.URL.Query()
	return req.Method == http.MethodGet && q.Get("watch") == "" && q.Get("resourceVersion") == "" && !bytes.HasSuffix([]byte(req.URL.Path), []byte("/apiexports"))
}

// isObjectRead: a GET of one object, consistent or not.
func isObjectRead(req *http.Request) bool {
	return req.Method == http.MethodGet && req.URL.Query().Get("watch") == "" && !bytes.HasSuffix([]byte(req.URL.Path), []byte("/apiexports"))
}

// staleAnswer answers every other consistent object read with the earlier
// answer kept for its path, when StaleConsistentRead is on.
func (p *Proxy) staleAnswer(req *http.Request) ([]byte, bool) {
	if p.active(ReadsFromBeforeAPause) && isConsistentObjectRead(req) {
		p.mu.Lock()
		defer p.mu.Unlock()
		body, ok := p.frozen[req.URL.Path]
		return body, ok
	}
	if !p.active(StaleConsistentRead) || !isConsistentObjectRead(req) || p.flip.Add(1)%2 == 0 {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	body, ok := p.answers[req.URL.Path]
	return body, ok
}

func (p *Proxy) modify(resp *http.Response) error {
	req := resp.Request
	if p.active(WriteDoneThenRefused) && isObjectWrite(req) && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated) && p.flip.Add(1)%2 == 0 {
		_ = resp.Body.Close()
		resp.StatusCode, resp.Status = http.StatusInsufficientStorage, "507 Insufficient Storage"
		resp.Header.Set("Content-Type", "application/json")
		resp.Header.Del("Content-Length")
		resp.ContentLength = int64(len(refusedAfterWrite))
		resp.Body = io.NopCloser(bytes.NewReader([]byte(refusedAfterWrite)))
		return nil
	}
	if p.active(RelayServesOldCopy) && isObjectRead(req) && resp.StatusCode == http.StatusOK {
		return p.oldCopy(resp)
	}
	if p.active(StaleReadWithoutAge) {
		resp.Header.Del(kcpcache.FreshnessAgeHeader)
	}
	if isConsistentRead(req) && resp.StatusCode == http.StatusServiceUnavailable && p.active(ConsistentReadWhileCutOff) {
		p.mu.Lock()
		body, ok := p.latest[req.URL.Path]
		p.mu.Unlock()
		if ok {
			_ = resp.Body.Close()
			resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
			resp.Header.Del("Retry-After")
			resp.Header.Set("Content-Type", "application/json")
			resp.Header.Del("Content-Length")
			resp.ContentLength = int64(len(body))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return nil
		}
	}
	if isConsistentRead(req) && !isConsistentObjectRead(req) && resp.StatusCode == http.StatusOK {
		return p.keep(resp, false)
	}
	if isConsistentObjectRead(req) && resp.StatusCode == http.StatusOK {
		return p.keep(resp, true)
	}
	return p.modifyWatch(resp)
}

// oldCopy replaces the body of an object read's 200 with the first one
// for its path, keeping the headers.
func (p *Proxy) oldCopy(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	p.mu.Lock()
	old, kept := p.oldCopies[resp.Request.URL.Path]
	if !kept {
		p.oldCopies[resp.Request.URL.Path], old = body, body
	}
	p.mu.Unlock()
	resp.Header.Del("Content-Length")
	resp.ContentLength = int64(len(old))
	resp.Body = io.NopCloser(bytes.NewReader(old))
	return nil
}

// keep reads a consistent read's 200 answer and keeps it as the latest for
// its path, and, for an object (first), as the first if it is.
func (p *Proxy) keep(resp *http.Response, first bool) error {
	req := resp.Request
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.latest[req.URL.Path] = body
	if _, kept := p.answers[req.URL.Path]; first && !kept {
		// The first answer stays: later answers are newer.
		p.answers[req.URL.Path] = body
	}
	p.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// modifyWatch skips or reorders a watch's events when a seeded fault says
// so.
func (p *Proxy) modifyWatch(resp *http.Response) error {
	req := resp.Request
	q := req.URL.Query()
	if q.Get("watch") != "true" || q.Get("resourceVersion") == "" || q.Get("resourceVersion") == "0" {
		return nil
	}
	skip, reorder := p.active(WatchSkipsAnEvent), p.active(WatchReordersEvents)
	if !skip && !reorder {
		return nil
	}
	in := resp.Body
	pr, pw := io.Pipe()
	resp.Body = pr
	resp.Header.Del("Content-Length")
	go func() {
		defer func() { _ = in.Close() }()
		dec := json.NewDecoder(in)
		enc := json.NewEncoder(pw)
		changes := 0
		var held json.RawMessage
		for {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				_ = pw.CloseWithError(err)
				return
			}
			raw, _ := json.Marshal(ev)
			if ev.Type == "ADDED" || ev.Type == "MODIFIED" || ev.Type == "DELETED" {
				changes++
				switch {
				case skip && changes == 1:
					continue
				case reorder && changes == 1:
					held = raw
					continue
				case reorder && changes == 2:
					if err := writeRaw(enc, raw); err != nil {
						return
					}
					raw = held
				}
			}
			if err := writeRaw(enc, raw); err != nil {
				return
			}
		}
	}()
	return nil
}

func writeRaw(enc *json.Encoder, raw json.RawMessage) error { return enc.Encode(raw) }
