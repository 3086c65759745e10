package robustness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// Resource is the type the traffic writes: APIExports, as kcp's shards
// push them (the cache serves it schema-less).
var Resource = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

// Traffic is the clients of one run: writers over a few keys (the same keys
// from several writers, so that their writes race), each reading a key
// before it writes it.
type Traffic struct {
	Writers int
	Keys    int
	// KeyPrefix names the keys (<prefix>0, <prefix>1, ...); empty: "k". A
	// run checked in windows (the soak) gives each window keys of its own,
	// so that each window's history starts, as the model does, from keys
	// that never existed.
	KeyPrefix string
	// Readers, when set, are where the writers read before they write
	// (chosen at random each time; a mirror's consistent reads are then in
	// the same history as the home's writes); otherwise they read where
	// they write.
	Readers []dynamic.ResourceInterface
	// StaleReaders, when set, are mirrors each writer also reads with
	// resourceVersion=0, once a round, at one chosen at random: a reader
	// switching caches, as cache/client's (each writer with its own memory
	// of the home revisions it accepted, which refuses time travel).
	StaleReaders []*StaleReader
	// Rec records every operation.
	Rec *Recorder
	// Spaces place the revisions of the caches (spaces.go).
	Spaces *HomeSpaces
	// Gate, when set, is held by the writes while a shape moves the
	// partition's home (MoveGate).
	Gate *MoveGate
}

// MoveGate lets a shape move a partition's home under traffic: the move
// waits for the writes under way and holds new ones until every cache
// follows the new home, so that no write is acknowledged by a home that
// another cache still confirms reads with. An update whose resourceVersion
// was read from the old home is not sent after the move (it would name a
// revision of another etcd, which the new home could hold by chance).
type MoveGate struct {
	mu sync.RWMutex
	// home is the partition's home now.
	home string
}

// NewMoveGate is the gate of a partition homed at home.
func NewMoveGate(home string) *MoveGate { return &MoveGate{home: home} }

// enter admits a write: false for an update read from a home the
// partition has left (nothing to release then).
func (g *MoveGate) enter(in Input, spaces *HomeSpaces) bool {
	if g == nil {
		return true
	}
	g.mu.RLock()
	if in.Op == OpUpdate && spaceOf(in.FromRV) != spaces.rank(g.home) {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *MoveGate) leave() {
	if g != nil {
		g.mu.RUnlock()
	}
}

// Move moves the partition's home to the cache to: with every write
// held, spaces rank to above every earlier home (before to answers as the
// home), then move runs.
func (g *MoveGate) Move(spaces *HomeSpaces, to string, move func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	spaces.moved(to)
	if err := move(); err != nil {
		return err
	}
	g.home = to
	return nil
}

// Home is the partition's home now.
func (g *MoveGate) Home() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.home
}

// requestTimeout bounds every request: a write that times out has an
// unknown outcome.
const requestTimeout = 10 * time.Second

// Run sends traffic through c until ctx ends.
func (tr Traffic) Run(ctx context.Context, c dynamic.ResourceInterface) {
	var wg sync.WaitGroup
	for id := range tr.Writers {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(int64(id) + time.Now().UnixNano()))
			memory := client.NewHomeRevisions()
			staleClients := make([]*http.Client, len(tr.StaleReaders))
			for i, s := range tr.StaleReaders {
				staleClients[i] = s.clientWith(memory)
			}
			for seq := 0; ctx.Err() == nil; seq++ {
				key := tr.key(rng.Intn(tr.Keys))
				value := fmt.Sprintf("c%d-%d", id, seq)
				if len(tr.StaleReaders) > 0 {
					// One stale read per round, at a mirror chosen at
					// random: as many as the writes, whatever the
					// machine's speed.
					at := rng.Intn(len(tr.StaleReaders))
					tr.StaleReaders[at].read(ctx, staleClients[at], tr.Rec, key, at+1, id)
				}
				reader, at := c, 0
				if len(tr.Readers) > 0 {
					at = rng.Intn(len(tr.Readers))
					reader = tr.Readers[at]
				}
				got := tr.get(ctx, reader, id, key, at)
				switch {
				case got == nil:
					continue
				case got.Status == StatusNotFound:
					tr.write(ctx, c, id, Input{Op: OpCreate, Key: key, Value: value})
				case rng.Intn(4) == 0:
					tr.write(ctx, c, id, Input{Op: OpDelete, Key: key})
				default:
					tr.write(ctx, c, id, Input{Op: OpUpdate, Key: key, Value: value, FromRV: got.RV})
				}
			}
		})
	}
	wg.Wait()
}

// key is the name of the traffic's key k.
func (tr Traffic) key(k int) string {
	prefix := tr.KeyPrefix
	if prefix == "" {
		prefix = "k"
	}
	return prefix + strconv.Itoa(k)
}

// get reads key consistently and records the read; nil when the read
// failed (a failed read changes nothing and is not part of the history).
func (tr Traffic) get(ctx context.Context, c dynamic.ResourceInterface, id int, key string, at int) *Output {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	rctx, by := withAnswer(rctx)
	call := tr.Rec.Now()
	u, err := c.Get(rctx, key, metav1.GetOptions{})
	ret := tr.Rec.Now()
	var out Output
	switch {
	case err == nil:
		out = Output{Status: StatusOK, Value: valueOf(u), RV: tr.Spaces.rvOf(u, by.by())}
	case apierrors.IsNotFound(err):
		out = Output{Status: StatusNotFound}
	default:
		return nil
	}
	tr.Rec.Record(Op{Client: id, Input: Input{Op: OpGet, Key: key, At: at}, Output: out, Call: call, Return: ret})
	return &out
}

// GetAll reads every key once, consistently, retrying failed reads: the
// final reads of a run, which make the convergence part of the history.
func (tr Traffic) GetAll(ctx context.Context, c dynamic.ResourceInterface) error {
	for k := range tr.Keys {
		key := tr.key(k)
		for tr.get(ctx, c, tr.Writers, key, 0) == nil {
			if ctx.Err() != nil {
				return fmt.Errorf("the final read of %s: %w", key, ctx.Err())
			}
			pause(ctx)
		}
	}
	return nil
}

func (tr Traffic) write(ctx context.Context, c dynamic.ResourceInterface, id int, in Input) {
	if !tr.Gate.enter(in, tr.Spaces) {
		return
	}
	defer tr.Gate.leave()
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	rctx, by := withAnswer(rctx)
	call := tr.Rec.Now()
	var u *unstructured.Unstructured
	var err error
	switch in.Op {
	case OpCreate:
		u, err = c.Create(rctx, object(in.Key, in.Value, 0), metav1.CreateOptions{})
	case OpUpdate:
		u, err = c.Update(rctx, object(in.Key, in.Value, raw(in.FromRV)), metav1.UpdateOptions{})
	case OpDelete:
		err = c.Delete(rctx, in.Key, metav1.DeleteOptions{})
	}
	ret := tr.Rec.Now()
	var out Output
	switch {
	case err == nil && u != nil:
		out = Output{Status: StatusOK, Value: valueOf(u), RV: tr.Spaces.rvOf(u, by.by())}
	case err == nil:
		out = Output{Status: StatusOK}
	case apierrors.IsAlreadyExists(err):
		out = Output{Status: StatusExists}
	case apierrors.IsConflict(err):
		out = Output{Status: StatusConflict}
	case apierrors.IsNotFound(err):
		out = Output{Status: StatusNotFound}
	default:
		out = Output{Status: StatusUnknown, Error: err.Error()}
		if status, ok := err.(apierrors.APIStatus); ok {
			out.Code, out.Reason = int(status.Status().Code), string(status.Status().Reason)
			if isUnexpectedResponse(status.Status()) {
				// No Status in the body (the test proxy's 502 while the
				// cache is down): the reason is client-go's, not the
				// cache's.
				out.Reason = ""
			}
		}
		if out.Code == http.StatusInsufficientStorage {
			// 507: not stored (a full disk, etcd's quota).
			out.Status = StatusRefused
		}
	}
	tr.Rec.Record(Op{Client: id, Input: in, Output: out, Call: call, Return: ret})
}

// isUnexpectedResponse reports whether client-go made status up for an
// answer whose body was no Status.
func isUnexpectedResponse(status metav1.Status) bool {
	if status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

func object(name, value string, rv int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": Resource.GroupVersion().String(),
		"kind":       "APIExport",
		"metadata":   map[string]interface{}{"name": name},
		"spec":       map[string]interface{}{"v": value},
	}}
	if rv > 0 {
		u.SetResourceVersion(strconv.FormatInt(rv, 10))
	}
	return u
}

func valueOf(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", "v")
	return v
}

func parseRV(v string) int64 {
	rv, _ := strconv.ParseInt(v, 10, 64)
	return rv
}

// Watch lists and watches the partition until ctx ends, resuming every
// ended watch from the last revision it delivered, and relisting after
// 410 Gone, or when another cache answers than the one the chain started
// at (the partition's home moved: its revisions are another etcd's, and
// the chain ends as at a 410); it returns every event, by session.
func Watch(ctx context.Context, c dynamic.ResourceInterface, spaces *HomeSpaces) []WatchEvent {
	var events []WatchEvent
	session := 0
	var from int64
	var at string
	relist := true
	for ctx.Err() == nil {
		if relist {
			lctx, by := withAnswer(ctx)
			list, err := c.List(lctx, metav1.ListOptions{})
			if err != nil {
				pause(ctx)
				continue
			}
			at = by.by()
			from = spaces.tag(at, parseRV(list.GetResourceVersion()))
			relist = false
		}
		wctx, by := withAnswer(ctx)
		w, err := c.Watch(wctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(raw(from), 10), AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				events = append(events, WatchEvent{Session: session, FromRV: from, Type: "GONE"})
				relist = true
				session++
			}
			pause(ctx)
			continue
		}
		if by.by() != at {
			// Another cache's etcd: its revisions do not continue the
			// chain's.
			w.Stop()
			events = append(events, WatchEvent{Session: session, FromRV: from, Type: "GONE"})
			relist = true
			session++
			continue
		}
		start := from
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if status := apierrors.FromObject(ev.Object); apierrors.IsGone(status) || apierrors.IsResourceExpired(status) {
					events = append(events, WatchEvent{Session: session, FromRV: start, Type: "GONE"})
					relist = true
				}
				break
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			// The watched cache's own revision, copy or not: a chain is
			// one etcd's history (a cache the partition's home moved away
			// from holds copies of the new home's objects; their events
			// come in its order).
			rv := spaces.tag(at, parseRV(u.GetResourceVersion()))
			events = append(events, WatchEvent{Session: session, FromRV: start, Type: string(ev.Type), Key: u.GetName(), Value: valueOf(u), RV: rv})
			from = max(from, rv)
		}
		w.Stop()
		session++
	}
	return events
}

// pause spaces the attempts of a client whose request failed (the cache
// restarting): a retry loop's interval, not a wait for anything.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// StaleReader reads a partition at a mirror with resourceVersion=0, over
// HTTP, for the answer's headers.
type StaleReader struct {
	// home is the partition's home; "" for a partition whose home moves,
	// whose homes spaces rank.
	home      string
	spaces    *HomeSpaces
	transport http.RoundTripper
	// url is the resource's collection in the partition at the mirror.
	url string
}

// NewStaleReader reads the partition cfg's host is scoped to, homed at
// home; for a partition whose home moves, home is "" and spaces say which
// caches have been its home.
func NewStaleReader(cfg *rest.Config, home string, spaces *HomeSpaces) (*StaleReader, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	return &StaleReader{home: home, spaces: spaces, transport: rt, url: strings.TrimSuffix(cfg.Host, "/") + "/apis/" + Resource.Group + "/" + Resource.Version + "/" + Resource.Resource}, nil
}

// names reports whether a header's entry for cache speaks of the
// partition's home: a mirror that does not know the shard's home yet
// answers for every peer it covers, and a mirror with one peer (a leaf
// under a relay) then names the relay, whose revisions are not the home's.
func (s *StaleReader) names(cache string) bool {
	switch {
	case s.home != "":
		return cache == s.home
	case s.spaces != nil:
		return s.spaces.rank(cache) > 0
	}
	return true
}

// clientWith is a client of the mirror whose answers pass memory, as
// cache/client's configs do: an answer older than one accepted before, at
// any cache sharing memory, is refused (*client.TimeTravelError).
func (s *StaleReader) clientWith(memory *client.HomeRevisions) *http.Client {
	return &http.Client{Transport: memory.Wrap(s.transport)}
}

// read reads key through hc for reader, and records the answer, if there
// is one to record (not when the mirror is down or refuses), or that
// reader's memory refused it as time travel.
func (s *StaleReader) read(ctx context.Context, hc *http.Client, rec *Recorder, key string, at, reader int) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, s.url+"/"+key+"?resourceVersion=0", nil)
	if err != nil {
		return
	}
	call := rec.Now()
	resp, err := hc.Do(req)
	if travel := (*client.TimeTravelError)(nil); errors.As(err, &travel) {
		rec.RecordStale(StaleRead{Key: key, At: at, Reader: reader, Call: call, Return: rec.Now(), Refused: travel.Error()})
		return
	}
	if err != nil {
		return
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	ret := rec.Now()
	if err != nil {
		return
	}
	read := StaleRead{Key: key, At: at, Reader: reader, Call: call, Return: ret}
	switch resp.StatusCode {
	case http.StatusOK:
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(body); err != nil {
			return
		}
		read.Status, read.Value, read.RV = StatusOK, valueOf(u), s.spaces.rvOf(u, resp.Header.Get(kcpcache.CacheNameHeader))
	case http.StatusNotFound:
		read.Status = StatusNotFound
	default:
		return
	}
	var ok bool
	read.Header = resp.Header.Get(kcpcache.HomeRevisionHeader)
	home, revision, ok := headerRevision(read.Header)
	if !ok || !s.names(home) {
		// No one revision of the home: nothing to judge the copy by.
		return
	}
	read.HomeRevision = s.spaces.tag(home, revision)
	if read.Age, ok = headerAge(resp.Header.Get(kcpcache.FreshnessAgeHeader)); !ok {
		return
	}
	rec.RecordStale(read)
}

// headerRevision reads the revision of "<home>=<epoch>/<revision>", the
// one home of a partition; a reading of the documented form, written here
// so that the check does not lean on the cache's own parser.
func headerRevision(v string) (string, int64, bool) {
	home, value, ok := strings.Cut(v, "=")
	if !ok || strings.Contains(value, ",") {
		return "", 0, false
	}
	_, raw, ok := strings.Cut(value, "/")
	if !ok {
		return "", 0, false
	}
	rev, err := strconv.ParseInt(raw, 10, 64)
	return home, rev, err == nil
}

// headerAge reads "<home>=<seconds>".
func headerAge(v string) (time.Duration, bool) {
	_, raw, ok := strings.Cut(v, "=")
	if !ok || strings.Contains(raw, ",") {
		return 0, false
	}
	seconds, err := strconv.ParseFloat(raw, 64)
	return time.Duration(seconds * float64(time.Second)), err == nil
}
