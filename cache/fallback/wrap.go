package fallback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// TargetFunc tells the fallback where the front-proxy sent a request; false
// means the request is not for one workspace of one shard (a wildcard, a
// virtual workspace), and the fallback stays out of it.
type TargetFunc func(*http.Request) (Target, bool)

// shardUnavailable is a 502, 503 or 504 that the shard (or a proxy in front
// of it) answered to a read.
type shardUnavailable struct{ status int }

func (e *shardUnavailable) Error() string {
	return fmt.Sprintf("it answered %d %s", e.status, http.StatusText(e.status))
}

// routed is what Wrap remembers of a request while the shard proxy
// handles it: its trail below the workspace, its query as the client sent
// it, and, when that query carries a version of the fallback's, the 410 to
// answer if the shard does answer.
type routed struct {
	trail          string
	query          string
	expireAnswered error
}

type routedKey struct{}

// errShardAnswered stops the proxy from passing on the shard's answer to a
// request that carried a version of the fallback's.
var errShardAnswered = errors.New("the shard answered a request that carried a version of the cache")

// Wrap engages the fallback on kcp's shard proxy, a ReverseProxy whose
// Director sends /clusters/<workspace>/<trail> to the shard that target
// names. It changes three things and nothing else:
//   - a request that cannot reach the shard (its ErrorHandler: refused
//     connection, timeout, TLS failure) is answered by Serve;
//   - a read the shard answers with 502, 503 or 504 is answered by Serve
//     (ModifyResponse); any other answer of the shard passes unchanged;
//   - a request carrying a resourceVersion or continue token that the
//     fallback handed out goes to the shard without it: a get or list is
//     answered by the shard at its current state; for a watch or a
//     continued list, an answer of the shard becomes a 410 (list again),
//     since the shard's history is not the cache's. While the shard does
//     not answer, Serve gets the request as the client sent it.
//
// The proxy's own ErrorHandler still answers what the fallback does not
// take (no target); its ModifyResponse, if any, still runs first.
func (f *Fallback) Wrap(proxy *httputil.ReverseProxy, target TargetFunc) http.Handler {
	onError := proxy.ErrorHandler
	if onError == nil {
		onError = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	}
	proxy.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		rt, hasRoute := r.Context().Value(routedKey{}).(*routed)
		if hasRoute && rt.expireAnswered != nil && errors.Is(err, errShardAnswered) {
			writeStatus(w, rt.expireAnswered)
			return
		}
		t, ok := target(r)
		if !ok || !hasRoute {
			onError(w, r, err)
			return
		}
		r.URL.RawQuery = rt.query
		f.Serve(w, r, t, rt.trail, describeCause(err))
	}
	modify := proxy.ModifyResponse
	proxy.ModifyResponse = func(resp *http.Response) error {
		if modify != nil {
			if err := modify(resp); err != nil {
				return err
			}
		}
		lost := false
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			lost = resp.Request != nil && resp.Request.Method == http.MethodGet
		}
		if resp.Request == nil {
			return nil
		}
		if _, ok := target(resp.Request); !ok {
			return nil
		}
		if lost {
			return &shardUnavailable{status: resp.StatusCode}
		}
		if rt, ok := resp.Request.Context().Value(routedKey{}).(*routed); ok && rt.expireAnswered != nil {
			return errShardAnswered
		}
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trail, ok := trailOf(r.URL.Path)
		if !ok {
			proxy.ServeHTTP(w, r)
			return
		}
		rt := &routed{trail: trail, query: r.URL.RawQuery}
		q, rewritten, expire := forShard(r.URL.Query(), verbOf(r, trail), resourceOf(r, trail))
		if rewritten {
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
			rt.expireAnswered = expire
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routedKey{}, rt)))
	})
}

// trailOf cuts /clusters/<workspace> off a front-proxy path.
func trailOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/clusters/")
	if !ok {
		return "", false
	}
	_, trail, _ := strings.Cut(rest, "/")
	return "/" + trail, true
}

func verbOf(r *http.Request, trail string) string {
	probe := r.Clone(r.Context())
	probe.URL.Path = trail
	if info, err := requestInfos.NewRequestInfo(probe); err == nil {
		return info.Verb
	}
	return ""
}

func resourceOf(r *http.Request, trail string) schema.GroupResource {
	probe := r.Clone(r.Context())
	probe.URL.Path = trail
	if info, err := requestInfos.NewRequestInfo(probe); err == nil {
		return schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	}
	return schema.GroupResource{}
}

// describeCause names why the shard did not answer in a user's terms.
func describeCause(err error) error {
	var unavailable *shardUnavailable
	var opErr *net.OpError
	switch {
	case errors.As(err, &unavailable):
		return unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("timed out")
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return fmt.Errorf("connection failed: %v", opErr.Err)
	}
	return err
}

func userFrom(r *http.Request) (user.Info, bool) { return request.UserFrom(r.Context()) }
