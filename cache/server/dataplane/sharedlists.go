package dataplane

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Shared LIST answers. A burst of identical LISTs (every shard's informer
// relisting a type after a restart of the cache, a fleet of controllers
// starting at once) costs the server one encoding per LIST: at 250,000
// objects, 200 informers of the largest type are 200 encodings (and gzip
// compressions) of the same 75,000 objects. While such LISTs wait in line
// for the list budget, nothing has been read for them yet, so they can be
// answered together: a LIST that finds an identical one waiting joins it
// instead of queueing, and when the first is admitted it reads the storage
// once, for all of them, and every one of them is written the same bytes.
//
// Why this never answers a LIST with data older than it asked for: a LIST
// joins only a flight that has not read the storage yet, so what the
// flight reads was read after the joiner arrived, as the joiner's own read
// would have been (for a consistent LIST, at least the revision the
// storage had when the joiner arrived; for one at a resourceVersion, the
// same resourceVersion and match). Once the flight reads, it takes no one
// more; a LIST arriving then starts the next flight.
//
// Which LISTs are identical: everything the answer is made of is in the
// key (flightKey): the request URI after the filters' rewrites (the
// hierarchy fixes a stale LIST's exact revision there), the partition
// scope and whether copies are shown with their bookkeeping, the user, and
// the request headers the answer is negotiated from. Response headers set
// outside the data plane (audit ID, freshness) stay each LIST's own; the
// headers the LIST handler sets (content type and encoding) are shared.
//
// What it costs: a flight with joiners keeps its answer (as encoded, after
// compression) in memory until every member has written it, which takes
// the place of the encoding buffers each of them would otherwise hold; a
// flight without joiners streams its answer as every LIST did before.

var (
	sharedListAnswers = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "lists",
		Name:           "shared_answers_total",
		Help:           "LISTs answered with the answer of an identical LIST they waited in line with, instead of reading and encoding their own.",
		StabilityLevel: metrics.ALPHA,
	})
	registerMetricsOnce sync.Once
)

// listFlights are the flights waiting to read, by key.
type listFlights struct {
	mu   sync.Mutex
	open map[string]*listFlight
}

func newListFlights() *listFlights {
	registerMetricsOnce.Do(func() { legacyregistry.MustRegister(sharedListAnswers) })
	return &listFlights{open: map[string]*listFlight{}}
}

// listFlight is one read of the storage for one or more identical LISTs.
type listFlight struct {
	key string
	// joiners is the LISTs waiting for the answer; read when the flight
	// starts, after which no one joins.
	joiners int
	started bool
	// done is closed when answer is final: the shared answer, or nil when
	// the joiners must serve themselves (the leader's LIST failed before it
	// read, or its client went away).
	done   chan struct{}
	answer *sharedAnswer
}

// sharedAnswer is a LIST's whole response as the LIST handler wrote it.
type sharedAnswer struct {
	status int
	header http.Header
	body   []byte
	// objects is how many objects the answer holds: what a joiner
	// reserves of the list budget to write it.
	objects int
}

// lead returns the open flight of key, joined (leader false), or a new
// flight led by the caller.
func (f *listFlights) lead(key string) (fl *listFlight, leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.open[key]; fl != nil {
		fl.joiners++
		return fl, false
	}
	fl = &listFlight{key: key, done: make(chan struct{})}
	f.open[key] = fl
	return fl, true
}

// start closes fl to joiners, as its leader reads the storage, and returns
// how many joined.
func (f *listFlights) start(fl *listFlight) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !fl.started {
		fl.started = true
		if f.open[fl.key] == fl {
			delete(f.open, fl.key)
		}
	}
	return fl.joiners
}

// finish publishes fl's answer (nil: joiners serve themselves).
func (f *listFlights) finish(fl *listFlight, a *sharedAnswer) {
	f.mu.Lock()
	if !fl.started {
		// Failed before reading: the joiners so far serve themselves, and
		// the next LIST of this key leads a flight of its own.
		fl.started = true
		if f.open[fl.key] == fl {
			delete(f.open, fl.key)
		}
	}
	f.mu.Unlock()
	fl.answer = a
	close(fl.done)
}

// joinerWritesPerList is how many joiners write a shared answer in the
// budget one LIST of its size takes: writing encoded bytes costs a
// fraction of reading and encoding them (TLS, and the client reading at
// its pace), so a few at once keep the connections busy without starving
// GETs as 200 at once did (GET p99 1.5-2.6 s in the bench's storm).
const joinerWritesPerList = 2

// joinerCost is what a joiner reserves of a budget of capacity objects to
// write a; an answer larger than the whole budget, which was read and
// encoded alone, is written by joinerWritesPerList joiners at once too.
func (a *sharedAnswer) joinerCost(capacity int) int {
	return max(1, min(a.objects, capacity)/joinerWritesPerList)
}

// writeTo writes the shared answer as this LIST's response; joined marks
// it as a joiner's (kcpcache.SharedListHeader).
func (a *sharedAnswer) writeTo(w http.ResponseWriter, joined bool) {
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	if joined {
		h.Set(kcpcache.SharedListHeader, "true")
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// flightKey is everything a LIST's answer depends on, or false when the
// request is not to be shared: a WATCH (served by the same handler, it
// never reads a list, and would hold its flight open while it runs), or a
// request without a user (nothing to tell two requesters apart by).
func flightKey(req *http.Request) (string, bool) {
	ctx := req.Context()
	if info, ok := request.RequestInfoFrom(ctx); !ok || info.Verb != "list" {
		return "", false
	}
	u, ok := request.UserFrom(ctx)
	if !ok || u == nil {
		return "", false
	}
	var b strings.Builder
	add := func(s string) {
		// Quoted: no value can run into the next.
		b.WriteString(strconv.Quote(s))
		b.WriteByte(' ')
	}
	add(req.Method)
	add(req.URL.RequestURI())
	scope, _ := kcpcache.ScopeFrom(ctx)
	add(scope.Shard)
	add(scope.Cluster)
	add(strconv.FormatBool(kcpcache.HidesCopyBookkeeping(ctx)))
	add(u.GetName())
	add(u.GetUID())
	for _, g := range u.GetGroups() {
		add(g)
	}
	b.WriteString("| ")
	extra := u.GetExtra()
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		add(k)
		for _, v := range extra[k] {
			add(v)
		}
	}
	b.WriteString("| ")
	// The headers the answer is negotiated from, and this project's own
	// (the hierarchy's), which may change what is served.
	names := make([]string, 0, len(req.Header))
	for name := range req.Header {
		if name == "Accept" || name == "Accept-Encoding" || strings.HasPrefix(name, "Kcp-Cache-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		add(name)
		for _, v := range req.Header[name] {
			add(v)
		}
	}
	return b.String(), true
}

// flightWriter is the leader's response writer: it passes writes through
// until the flight starts, and then either keeps passing them through (no
// joiners) or records the answer for everyone (joiners).
type flightWriter struct {
	w http.ResponseWriter
	// recording is decided at start; header, status and body are the
	// recorded answer.
	recording bool
	// wrote is set once anything went to w, after which the answer cannot
	// be shared.
	wrote  bool
	header http.Header
	status int
	body   bytes.Buffer
}

// started decides, as the flight reads, whether the answer is recorded.
func (fw *flightWriter) started(joiners int) {
	if joiners > 0 && !fw.wrote {
		fw.recording = true
		fw.header = http.Header{}
	}
}

func (fw *flightWriter) Header() http.Header {
	if fw.recording {
		return fw.header
	}
	return fw.w.Header()
}

func (fw *flightWriter) WriteHeader(status int) {
	if fw.recording {
		if fw.status == 0 {
			fw.status = status
		}
		return
	}
	fw.wrote = true
	fw.w.WriteHeader(status)
}

func (fw *flightWriter) Write(p []byte) (int, error) {
	if fw.recording {
		if fw.status == 0 {
			fw.status = http.StatusOK
		}
		return fw.body.Write(p)
	}
	fw.wrote = true
	return fw.w.Write(p)
}

// Flush sends what was written so far, unless it is being recorded.
func (fw *flightWriter) Flush() {
	if fw.recording {
		return
	}
	if f, ok := fw.w.(http.Flusher); ok {
		fw.wrote = true
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (fw *flightWriter) Unwrap() http.ResponseWriter { return fw.w }

// answer is the recorded answer, or nil when nothing was recorded or the
// leader's request ended before its answer was complete (its client went
// away or its time ran out: what was recorded may be cut short).
func (fw *flightWriter) answer(ctx context.Context, objects int) *sharedAnswer {
	if !fw.recording || ctx.Err() != nil || fw.status == 0 {
		return nil
	}
	return &sharedAnswer{status: fw.status, header: fw.header, body: fw.body.Bytes(), objects: objects}
}

// flightStart carries the leader's flight from the LIST handler to the
// lister, which starts it when it reads the storage.
type flightStart struct {
	flights *listFlights
	flight  *listFlight
	writer  *flightWriter
}

// begin closes the flight to joiners and settles whether its answer is
// recorded; it is called once, right before the storage is read.
func (s *flightStart) begin() {
	if s == nil {
		return
	}
	s.writer.started(s.flights.start(s.flight))
}
