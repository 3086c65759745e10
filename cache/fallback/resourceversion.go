package fallback

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resourceVersions and continue tokens of the cache and of the shard count
// in different etcds, so a client must never carry one to the other: a watch
// resumed at a shard's revision in the cache's history (or the reverse) would
// skip or replay changes without a sign. Every resourceVersion and continue
// token the fallback hands out is prefixed with cacheVersionPrefix. A request
// with a prefixed one is the cache's (the prefix is taken off before the
// cache sees it); an unprefixed one is the shard's. Crossing over is either a
// read of the current state (a get or list: the version is dropped) or a 410
// Expired, on which every Kubernetes client lists again (a watch, a
// continued list). The prefix makes the version unparsable for an apiserver,
// so a client that reaches a shard by another way fails loudly rather than
// resuming at a wrong point.
const cacheVersionPrefix = "cache-"

// versionQuery is what a request's query says about versions.
type versionQuery struct {
	resourceVersion string
	continueToken   string
}

func versionsOf(q url.Values) versionQuery {
	return versionQuery{resourceVersion: q.Get("resourceVersion"), continueToken: q.Get("continue")}
}

// fromCache reports whether a version was handed out by the fallback.
func fromCache(v string) bool { return strings.HasPrefix(v, cacheVersionPrefix) }

// unversioned reports whether v says nothing about whose history it is
// from: "" (the current state) and "0" (any state) mean the same to both.
func unversioned(v string) bool { return v == "" || v == "0" }

// forCache rewrites q for the cache, or returns the 410 that tells the
// client to list again.
func forCache(q url.Values, verb string, gr schema.GroupResource) (url.Values, error) {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	v := versionsOf(q)
	if v.continueToken != "" {
		if !fromCache(v.continueToken) {
			return nil, expired(gr, "the continue token is the shard's; the list is served from the cache now, so start it again")
		}
		out.Set("continue", strings.TrimPrefix(v.continueToken, cacheVersionPrefix))
	}
	switch {
	case v.resourceVersion == "" && verb != "watch":
		// "The current state": the fallback has the shard's last pushed
		// state, not the current one, so it reads the cache's copy as it
		// is (resourceVersion 0) rather than ask the cache to confirm it
		// with a home that may be lost with the shard; the Warning gives
		// its age.
		out.Set("resourceVersion", "0")
		out.Del("resourceVersionMatch")
	case unversioned(v.resourceVersion):
	case fromCache(v.resourceVersion):
		out.Set("resourceVersion", strings.TrimPrefix(v.resourceVersion, cacheVersionPrefix))
	case verb == "watch":
		return nil, expired(gr, "the resourceVersion is the shard's; the workspace is served from the cache now, so list again")
	default:
		// A get or list at a version of the shard's history: the cache's
		// current state is what the fallback has; the Warning says how old.
		out.Del("resourceVersion")
		out.Del("resourceVersionMatch")
	}
	return out, nil
}

// forShard rewrites q for the shard: a version of the fallback's is dropped.
// For a watch or a continued list it also returns the 410 to answer if the
// shard answers: the client must list again in the shard's history.
func forShard(q url.Values, verb string, gr schema.GroupResource) (url.Values, bool, error) {
	v := versionsOf(q)
	if !fromCache(v.resourceVersion) && !fromCache(v.continueToken) {
		return q, false, nil
	}
	out := url.Values{}
	for k, vs := range q {
		out[k] = vs
	}
	out.Del("resourceVersion")
	out.Del("resourceVersionMatch")
	out.Del("continue")
	switch {
	case fromCache(v.continueToken):
		return out, true, expired(gr, "the continue token is the cache's; the shard answers again, so start the list again")
	case verb == "watch":
		return out, true, expired(gr, "the resourceVersion is the cache's; the shard answers again, so list again")
	}
	return out, true, nil
}

func expired(gr schema.GroupResource, why string) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("%s: %s", gr.String(), why))
}

// rewriteVersions prefixes the versions in one decoded answer: an object, a
// list (its items), a Table (its rows' objects).
// Only those places are touched: a field named resourceVersion elsewhere in
// an object is the object's data.
func rewriteVersions(obj map[string]any) {
	prefixMeta(obj)
	if items, ok := obj["items"].([]any); ok {
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				prefixMeta(m)
			}
		}
	}
	if rows, ok := obj["rows"].([]any); ok {
		for _, r := range rows {
			if row, ok := r.(map[string]any); ok {
				if o, ok := row["object"].(map[string]any); ok {
					prefixMeta(o)
				}
			}
		}
	}
}

func prefixMeta(obj map[string]any) {
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range []string{"resourceVersion", "continue"} {
		if v, ok := meta[k].(string); ok && v != "" {
			meta[k] = cacheVersionPrefix + v
		}
	}
}

// rewriteBody rewrites one JSON answer. A body that is not JSON (the cache
// answers JSON for everything it serves) is refused rather than passed on
// with the cache's versions in it.
func rewriteBody(body []byte) ([]byte, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("decoding the cache's answer: %w", err)
	}
	rewriteVersions(obj)
	return json.Marshal(obj)
}

// rewriteWatch copies a JSON watch stream from src to w event by event,
// flushing after each, with every event's versions prefixed.
func rewriteWatch(w http.ResponseWriter, src io.Reader) error {
	dec := json.NewDecoder(src)
	dec.UseNumber()
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	for {
		var event map[string]any
		if err := dec.Decode(&event); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if o, ok := event["object"].(map[string]any); ok {
			rewriteVersions(o)
		}
		if err := enc.Encode(event); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
