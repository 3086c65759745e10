package client

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// ClusterClient is a dynamic client for every scope of a kcp-cache server.
// All scopes share one HTTP client and one rate limiter, so a controller that
// touches many clusters holds one connection pool and one request budget.
type ClusterClient struct {
	config     *rest.Config
	httpClient *http.Client
}

// NewForConfig returns a ClusterClient for the server cfg points at. cfg may
// point at the server root or at a scope; Cluster replaces the scope. cfg's
// WrapTransport is kept, so a config from NewConfig still honours WithShard
// and WithCluster, which then take precedence over Cluster's arguments.
func NewForConfig(cfg *rest.Config) (*ClusterClient, error) {
	config := rest.CopyConfig(cfg)
	config.ContentType = runtime.ContentTypeJSON
	config.AcceptContentTypes = runtime.ContentTypeJSON
	// Without a shared limiter every per-scope client would get its own
	// budget and the sum would be unbounded.
	if config.RateLimiter == nil && config.QPS >= 0 {
		qps, burst := config.QPS, config.Burst
		if qps == 0 {
			qps = rest.DefaultQPS
		}
		if burst == 0 {
			burst = rest.DefaultBurst
		}
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	// Cluster relies on the host parsing once it is past this point.
	if _, _, err := rest.DefaultServerUrlFor(config); err != nil {
		return nil, fmt.Errorf("server URL of config: %w", err)
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("building HTTP client: %w", err)
	}
	return &ClusterClient{config: config, httpClient: httpClient}, nil
}

// Cluster returns a dynamic client for the scope shard/cluster; either may be
// cache.Wildcard, in which case the server allows only list and watch. An
// invalid name yields a client whose every request fails with the validation
// error, so no malformed segment ever reaches a URL.
func (c *ClusterClient) Cluster(shard, cluster string) dynamic.Interface {
	cfg, err := ScopedConfig(c.config, shard, cluster)
	if err == nil {
		var client dynamic.Interface
		if client, err = dynamic.NewForConfigAndClient(cfg, c.httpClient); err == nil {
			return client
		}
	}
	failing := &http.Client{Transport: failingRoundTripper{err: fmt.Errorf("scope %s/%s: %w", shard, cluster, err)}}
	// c.config's host parsed in NewForConfig, so this cannot fail.
	client, _ := dynamic.NewForConfigAndClient(c.config, failing)
	return client
}

// failingRoundTripper fails every request with err.
type failingRoundTripper struct{ err error }

// RoundTrip implements http.RoundTripper.
func (rt failingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody(req)
	return nil, rt.err
}
