package client

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// No time travel across caches. A cache answers a read with the state of
// each home the data reflects (kcpcache.HomeRevisionHeader: home, the
// home's epoch, a revision). A reader that moves between caches (a
// failover to another region) could otherwise be answered by a mirror
// that is behind what it read before, and see objects go back. The round
// tripper below remembers the highest revision accepted per (home, home
// epoch, shard segment of the request path, resource) and refuses a
// response that reflects a lower one with a *TimeTravelError, after
// closing its body; client-go's reflectors and informers retry a failed
// list or watch, which is the intended recovery (the next answer, from a
// cache that caught up or another one, passes).
//
// A home's answer for its own data (kcpcache.CacheNameHeader names the
// home of the entry) is never refused: its consistent reads include every
// change it acknowledged. Its revision is recorded, so a mirror that has
// not applied the change a reader saw at the home is refused afterwards.
//
// What a reader may conclude from a response it was given:
//   - For each home in the header, the data is no older than any state of
//     that home this memory accepted before, in the same home epoch, for
//     the same shard segment and resource.
//   - Answers of two mirrors are compared by their applied revisions, which
//     count every change of the home, not only this data's: a mirror that
//     has all of this data but has applied less of the home than another
//     one is refused until it has (false refusals, never a missed one).
//   - Nothing about freshness: an accepted answer may still be stale (it
//     is only not older than what was seen); FreshnessAgeHeader says how
//     stale a mirror's answer may be.
//   - Nothing across home epochs: a home restored from a backup starts a
//     new epoch, a new sequence of revisions, and its revisions are not
//     compared with the old ones (the reader relists anyway: its
//     resourceVersions went back).
//   - Nothing about responses without the header (a cache without a name,
//     a server that predates hierarchies) or other than GETs answered with
//     success or 404 Not Found (lists, gets and watches; a mirror's 404
//     for an object is a state of its home too, and one behind what the
//     reader saw would make a present object vanish): they pass and are
//     not recorded.
//
// The resource of the key is the group and resource of the request path,
// whatever the version, namespace, name or subresource: a home's revisions
// are kept per shard and group/resource, so a list and a get of one type
// compare. The cluster segment is not part of the key, for the same reason.

// TimeTravelError is the error of a response refused because it reflects
// an older state of a home than one already accepted.
type TimeTravelError struct {
	// Home and Epoch name the home and its epoch whose state went back.
	Home, Epoch string
	// Shard and Resource are the key's shard segment of the request path
	// ("" for a path without one) and "<resource>.<group>" (or the path
	// below the scope, for a path that names no resource).
	Shard, Resource string
	// Seen is the highest revision accepted before; Answered is the lower
	// one of the refused response.
	Seen, Answered int64
	// Cache is the cache that answered (kcpcache.CacheNameHeader), "" when
	// it gave no name.
	Cache string
}

// Error implements error.
func (e *TimeTravelError) Error() string {
	cache := e.Cache
	if cache == "" {
		cache = "an unnamed cache"
	} else {
		cache = fmt.Sprintf("cache %q", cache)
	}
	return fmt.Sprintf("refused a response of %s: it reflects revision %d of home %q (epoch %s) for shard %q, %s; revision %d was already seen (time travel)",
		cache, e.Answered, e.Home, e.Epoch, e.Shard, e.Resource, e.Seen)
}

// HomeRevisions is the memory of the highest home revisions accepted, per
// (home, home epoch, shard segment, resource). Its Wrap round trippers may
// serve many clients and configs at once: every client that shares one
// memory is protected together, whichever cache each one talks to.
type HomeRevisions struct {
	mu   sync.Mutex
	seen map[homeRevisionKey]int64
}

type homeRevisionKey struct {
	home, epoch, shard, resource string
}

// NewHomeRevisions returns an empty memory.
func NewHomeRevisions() *HomeRevisions {
	return &HomeRevisions{seen: map[homeRevisionKey]int64{}}
}

// processHomeRevisions is the memory of NewHomeRevisionRoundTripper, and so
// of every config NewConfig returns: configs for different caches, built
// one by one, share it, so a reader that fails over is protected without
// doing anything.
var processHomeRevisions = NewHomeRevisions()

// NewHomeRevisionRoundTripper returns a round tripper that refuses time
// travel (see TimeTravelError) with the memory shared by the whole process.
// NewConfig installs it.
func NewHomeRevisionRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return processHomeRevisions.Wrap(delegate)
}

// Wrap returns a round tripper that refuses time travel with memory h; it
// has the signature of transport.WrapperFunc. It must be closer to the
// wire than the round trippers that set the shard segment, to see the
// final path (NewConfig installs it so).
func (h *HomeRevisions) Wrap(delegate http.RoundTripper) http.RoundTripper {
	return &homeRevisionRoundTripper{delegate: delegate, memory: h}
}

// Seen returns the highest revision accepted for the key, and whether any
// was.
func (h *HomeRevisions) Seen(home, epoch, shard, resource string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rev, ok := h.seen[homeRevisionKey{home: home, epoch: epoch, shard: shard, resource: resource}]
	return rev, ok
}

// admit compares every entry of a response answered by cache with the
// memory and records them all when none went back; otherwise it records
// nothing. The entry of cache itself, the home answering for its own
// data, is recorded and never compared: a home's revision is that of the
// last change to the data (kcpcache.HomeRevisionHeader), which may be
// below a mirror's (every change of the home applied up to it, other
// data's included) although the home's answer includes everything it
// acknowledged; refusing it would last until that data changed again.
func (h *HomeRevisions) admit(cache, shard, resource string, entries []kcpcache.HomeRevision) *TimeTravelError {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		if cache != "" && e.Home == cache {
			continue
		}
		k := homeRevisionKey{home: e.Home, epoch: e.Epoch, shard: shard, resource: resource}
		if seen, ok := h.seen[k]; ok && e.Revision < seen {
			return &TimeTravelError{Home: e.Home, Epoch: e.Epoch, Shard: shard, Resource: resource, Seen: seen, Answered: e.Revision}
		}
	}
	for _, e := range entries {
		k := homeRevisionKey{home: e.Home, epoch: e.Epoch, shard: shard, resource: resource}
		h.seen[k] = max(h.seen[k], e.Revision)
	}
	return nil
}

type homeRevisionRoundTripper struct {
	delegate http.RoundTripper
	memory   *HomeRevisions
}

var _ utilnet.RoundTripperWrapper = &homeRevisionRoundTripper{}

// RoundTrip implements http.RoundTripper.
func (rt *homeRevisionRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.delegate.RoundTrip(req)
	if err != nil || resp == nil || req.Method != http.MethodGet || (resp.StatusCode < 200 || resp.StatusCode > 299) && resp.StatusCode != http.StatusNotFound {
		return resp, err
	}
	values := resp.Header.Values(kcpcache.HomeRevisionHeader)
	if len(values) == 0 {
		return resp, nil
	}
	entries, perr := kcpcache.ParseHomeRevisions(strings.Join(values, ","))
	if perr != nil || len(entries) == 0 {
		// A header this client cannot read says nothing it could compare.
		return resp, nil
	}
	shard, resource := homeRevisionScope(req.URL.Path)
	cache := resp.Header.Get(kcpcache.CacheNameHeader)
	if travel := rt.memory.admit(cache, shard, resource, entries); travel != nil {
		travel.Cache = cache
		_ = resp.Body.Close()
		return nil, travel
	}
	return resp, nil
}

// WrappedRoundTripper lets client-go see through this round tripper.
func (rt *homeRevisionRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.delegate }

// homeRevisionScope returns the shard segment of path and its resource,
// "<resource>.<group>" ("<resource>" in the core group), or the API path
// below the scope when it names no resource (discovery).
func homeRevisionScope(path string) (shard, resource string) {
	p, ok := parseRequestPath(path)
	if !ok {
		return "", path
	}
	if !p.hasShard {
		p.shard = ""
	}
	return p.shard, resourceOfAPIPath(p.rest)
}

// resourceOfAPIPath reads the group and resource of a Kubernetes API path:
// /api/v1/[watch/][namespaces/{ns}/]{resource}[/...] or
// /apis/{group}/{version}/[watch/][namespaces/{ns}/]{resource}[/...].
func resourceOfAPIPath(apiPath string) string {
	parts := strings.Split(strings.Trim(apiPath, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return apiPath
	}
	if parts[0] == "watch" && len(parts) > 1 {
		// The deprecated watch prefix.
		parts = parts[1:]
	}
	// A namespaced resource, not a namespace or its status or finalize
	// subresource.
	if parts[0] == "namespaces" && len(parts) >= 3 && (len(parts) > 3 || parts[2] != "status" && parts[2] != "finalize") {
		parts = parts[2:]
	}
	if group == "" {
		return parts[0]
	}
	return parts[0] + "." + group
}
