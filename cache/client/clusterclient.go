package client

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// ClusterClient is a dynamic client for every scope of a kcp-cache server.
// All scopes share one HTTP client and one rate limiter, so a controller that
// touches many clusters holds one connection pool and one request budget.
type ClusterClient struct {
	config     *rest.Config
	httpClient *http.Client
	// paths, when set, replaces the cache's URL layout; see NewForConfigWithPaths.
	paths PathFunc
	// epochs records the epoch every response announces.
	epochs *Epochs
}

// PathFunc returns the URL path prefix that addresses scope on a server
// whose layout is not the cache's, for example "/clusters/" + scope.Cluster
// on a kcp shard, which holds one shard's objects.
type PathFunc func(scope kcpcache.Scope) string

// NewForConfigWithPaths is NewForConfig for a server that lays out scopes
// with paths instead of /services/cache/shards/{shard}/clusters/{cluster}.
// Informer factories built on it work unchanged; a shard stand-in uses it
// for its own objects.
func NewForConfigWithPaths(cfg *rest.Config, paths PathFunc) (*ClusterClient, error) {
	c, err := NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c.paths = paths
	return c, nil
}

// NewForConfig returns a ClusterClient for the server cfg points at. cfg may
// point at the server root or at a scope; Cluster replaces the scope. cfg's
// WrapTransport is kept, so a config from NewConfig still honours WithShard
// and WithCluster, which then take precedence over Cluster's arguments.
func NewForConfig(cfg *rest.Config) (*ClusterClient, error) {
	config, err := clusterConfig(cfg)
	if err != nil {
		return nil, err
	}
	epochs := newEpochs()
	withEpochs := rest.CopyConfig(config)
	withEpochs.Wrap(func(rt http.RoundTripper) http.RoundTripper { return epochRoundTripper{delegate: rt, epochs: epochs} })
	httpClient, err := rest.HTTPClientFor(withEpochs)
	if err != nil {
		return nil, fmt.Errorf("building HTTP client: %w", err)
	}
	return &ClusterClient{config: config, httpClient: httpClient, epochs: epochs}, nil
}

// NewForConfigAndClient is NewForConfig with the caller's HTTP client,
// built from cfg (rest.HTTPClientFor): every request of the ClusterClient
// goes through its transport, so a caller that sends requests of its own to
// the same server holds one client and one connection pool for both. The
// epoch of each response to the ClusterClient's requests is recorded
// around that transport (Epochs); the caller's own requests are not
// counted.
func NewForConfigAndClient(cfg *rest.Config, httpClient *http.Client) (*ClusterClient, error) {
	config, err := clusterConfig(cfg)
	if err != nil {
		return nil, err
	}
	epochs := newEpochs()
	delegate := httpClient.Transport
	if delegate == nil {
		delegate = http.DefaultTransport
	}
	withEpochs := *httpClient
	withEpochs.Transport = epochRoundTripper{delegate: delegate, epochs: epochs}
	return &ClusterClient{config: config, httpClient: &withEpochs, epochs: epochs}, nil
}

// clusterConfig is cfg as a ClusterClient sends with it: JSON, and one rate
// limiter for every scope.
func clusterConfig(cfg *rest.Config) (*rest.Config, error) {
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
	return config, nil
}

// Epochs reports the cache epoch the server announces on the client's
// responses; see kcpcache.EpochHeader.
func (c *ClusterClient) Epochs() *Epochs { return c.epochs }

// Cluster returns a dynamic client for the scope shard/cluster; either may be
// kcpcache.Wildcard, in which case the server allows only list and watch. An
// invalid name yields a client whose every request fails with the validation
// error, so no malformed segment ever reaches a URL.
func (c *ClusterClient) Cluster(shard, cluster string) dynamic.Interface {
	cfg, err := c.scopedConfig(shard, cluster)
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

func (c *ClusterClient) scopedConfig(shard, cluster string) (*rest.Config, error) {
	if c.paths == nil {
		return ScopedConfig(c.config, shard, cluster)
	}
	scope, err := kcpcache.NewScope(shard, cluster)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(c.config)
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, c.paths(scope))
	return cfg, nil
}

// failingRoundTripper fails every request with err.
type failingRoundTripper struct{ err error }

// RoundTrip implements http.RoundTripper.
func (rt failingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody(req)
	return nil, rt.err
}
