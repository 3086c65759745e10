package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"sigs.k8s.io/yaml"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The round trippers below have the signature of transport.WrapperFunc, so
// they compose through rest.Config.Wrap. Each one renders the canonical
// /services/cache/shards/{s}/clusters/{c}/... layout from what it finds, so
// they give the same result in any order. They never modify the caller's
// request: a rewritten request is a clone.

// NewServicePrefixRoundTripper returns a round tripper that adds the
// /services/cache prefix to request paths that lack it. Health and metrics
// paths are left alone.
func NewServicePrefixRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return &pathRoundTripper{delegate: delegate, edit: func(*http.Request, *requestPath) error { return nil }}
}

// NewShardRoundTripper returns a round tripper that sets the shard segment of
// request paths: to the shard in the request context (WithShard) when there is
// one, else to the shard already in the path, else to the wildcard.
func NewShardRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return &pathRoundTripper{delegate: delegate, edit: func(req *http.Request, p *requestPath) error {
		if shard, ok := ShardFrom(req.Context()); ok {
			if shard != kcpcache.Wildcard {
				if err := kcpcache.ValidateShardName(shard); err != nil {
					return fmt.Errorf("shard in request context: %w", err)
				}
			}
			p.shard = shard
		}
		if p.shard == "" {
			p.shard = kcpcache.Wildcard
		}
		p.hasShard = true
		return nil
	}}
}

// NewClusterRoundTripper returns a round tripper that sets the cluster segment
// of request paths: to the cluster in the request context (WithCluster) when
// there is one, else to the cluster already in the path, else to the wildcard.
func NewClusterRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return &pathRoundTripper{delegate: delegate, edit: func(req *http.Request, p *requestPath) error {
		if cluster, ok := ClusterFrom(req.Context()); ok {
			if cluster != kcpcache.Wildcard {
				if err := kcpcache.ValidateClusterName(cluster); err != nil {
					return fmt.Errorf("cluster in request context: %w", err)
				}
			}
			p.cluster = cluster
		}
		if p.cluster == "" {
			p.cluster = kcpcache.Wildcard
		}
		p.hasCluster = true
		return nil
	}}
}

// NewShardFromObjectRoundTripper returns a round tripper that sends a POST,
// PUT or PATCH to the shard named by the kcp.io/shard annotation of the object
// in its body, so a replicating controller can write copies of many shards
// through one client. It also records that shard in the request context, so a
// shard round tripper closer to the wire agrees. Bodies without the annotation
// (or that are not JSON or YAML objects, such as JSON patches) pass unchanged.
func NewShardFromObjectRoundTripper(delegate http.RoundTripper) http.RoundTripper {
	return &shardFromObjectRoundTripper{delegate: delegate}
}

// pathRoundTripper rewrites the request path with edit.
type pathRoundTripper struct {
	delegate http.RoundTripper
	edit     func(*http.Request, *requestPath) error
}

var _ utilnet.RoundTripperWrapper = &pathRoundTripper{}

// RoundTrip implements http.RoundTripper.
func (rt *pathRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	p, ok := parseRequestPath(req.URL.Path)
	if !ok {
		return rt.delegate.RoundTrip(req)
	}
	if err := rt.edit(req, &p); err != nil {
		closeBody(req)
		return nil, err
	}
	return rt.delegate.RoundTrip(kcpcache.WithPath(req, p.String()))
}

// WrappedRoundTripper lets client-go see through this round tripper.
func (rt *pathRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.delegate }

// shardFromObjectRoundTripper routes writes by the object's shard annotation.
type shardFromObjectRoundTripper struct {
	delegate http.RoundTripper
}

var _ utilnet.RoundTripperWrapper = &shardFromObjectRoundTripper{}

// RoundTrip implements http.RoundTripper.
func (rt *shardFromObjectRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return rt.delegate.RoundTrip(req)
	}
	if req.Body == nil || req.Body == http.NoBody {
		return rt.delegate.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	// The original body is ours to close once read, whatever happens next.
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading request body to find its shard: %w", err)
	}

	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))

	shard := shardAnnotation(body, req.Header.Get("Content-Type"))
	// An invalid name must not become a path segment; the server refuses the
	// body anyway when it disagrees with the path.
	if shard == "" || kcpcache.ValidateShardName(shard) != nil {
		return rt.delegate.RoundTrip(out)
	}
	out = out.WithContext(WithShard(out.Context(), shard))
	if p, ok := parseRequestPath(out.URL.Path); ok {
		p.shard, p.hasShard = shard, true
		out = kcpcache.WithPath(out, p.String())
	}
	return rt.delegate.RoundTrip(out)
}

// WrappedRoundTripper lets client-go see through this round tripper.
func (rt *shardFromObjectRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.delegate }

// shardAnnotation returns metadata.annotations["kcp.io/shard"] of the object
// in body, or "" when body is not an object carrying it.
func shardAnnotation(body []byte, contentType string) string {
	if strings.Contains(contentType, "protobuf") || strings.Contains(contentType, "cbor") {
		return ""
	}
	if strings.Contains(contentType, "yaml") {
		// Server-side apply bodies are YAML, usually JSON written as YAML.
		converted, err := yaml.YAMLToJSON(body)
		if err != nil {
			return ""
		}
		body = converted
	}
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return ""
	}
	return obj.Metadata.Annotations[kcpcache.AnnotationShard]
}

// closeBody honours the RoundTripper contract on errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
