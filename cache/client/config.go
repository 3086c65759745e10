package client

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// NewConfig returns a copy of base for a kcp-cache server: it speaks JSON (the
// server serves no protobuf) and routes every request by its context. A
// request goes to the shard and cluster set with WithShard and WithCluster;
// segments the context does not set keep what the path (or the Host, see
// ScopedConfig) already names, and default to the wildcard. Health and metrics
// paths are not rewritten. A response that reflects an older state of a home
// than one already seen in this process is refused (NewHomeRevisionRoundTripper).
func NewConfig(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	// First, so closest to the wire of the four: it needs the final path.
	cfg.Wrap(NewHomeRevisionRoundTripper)
	cfg.Wrap(NewServicePrefixRoundTripper)
	cfg.Wrap(NewShardRoundTripper)
	cfg.Wrap(NewClusterRoundTripper)
	return cfg
}

// ScopedConfig returns a copy of base whose Host targets the scope
// shard/cluster, for example https://host/services/cache/shards/amber/clusters/root.
// Either name may be kcpcache.Wildcard. A scope already in base's Host is
// replaced; a proxy path in front of it is kept. The scope lives in Host rather
// than APIPath because dynamic clients ignore APIPath.
func ScopedConfig(base *rest.Config, shard, cluster string) (*rest.Config, error) {
	scope, err := kcpcache.NewScope(shard, cluster)
	if err != nil {
		return nil, err
	}
	host, err := scopedHost(base, scope)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.Host = host
	return cfg, nil
}

// ConfigFromKubeconfig loads a config with the standard loading rules: the
// file at path when it is not empty, else $KUBECONFIG or ~/.kube/config, else
// the in-cluster config. contextName selects a context; "" means the current
// one. The result is prepared by NewConfig.
func ConfigFromKubeconfig(path, contextName string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: contextName}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return NewConfig(cfg), nil
}

// ConfigFromURL returns a config, prepared by NewConfig, for the server at
// rawURL, an http or https URL with no credentials. A scope path in the URL
// (.../services/cache/shards/{s}/clusters/{c}) is kept as the default scope.
func ConfigFromURL(rawURL string) (*rest.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parsing server URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("server URL %q must use http or https", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("server URL %q has no host", rawURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q must not carry credentials, a query or a fragment", rawURL)
	}
	return NewConfig(&rest.Config{Host: u.String()}), nil
}

// scopedHost renders base's server URL with the path of scope in place of any
// scope already there. The scope is appended as text rather than through
// url.URL.Path, which would escape the wildcard as %2A: harmless on the wire,
// but unreadable in logs and kubeconfigs.
func scopedHost(base *rest.Config, scope kcpcache.Scope) (string, error) {
	u, _, err := rest.DefaultServerUrlFor(base)
	if err != nil {
		return "", fmt.Errorf("server URL of config: %w", err)
	}
	proxyPath := strings.TrimSuffix(u.EscapedPath(), "/")
	// Keep whatever precedes an existing scope: that is a proxy's path.
	if i := strings.Index(proxyPath+"/", kcpcache.ServicePrefix+"/"); i >= 0 {
		proxyPath = proxyPath[:i]
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = "", "", "", ""
	return kcpcache.JoinHostPath(u.String()+proxyPath, kcpcache.ScopedPathPrefix(scope)), nil
}

// Unthrottled returns a copy of cfg without client-side rate limiting (a
// negative QPS, which client-go reads as "no limiter", and no limiter of
// its own). It is the one way this module turns client-go's default of 5
// requests a second off: for its own work against a cache it serves or
// mirrors, and for tests that measure the cache, not the client. The
// server's in-flight limits still apply.
func Unthrottled(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.QPS, out.Burst, out.RateLimiter = -1, 0, nil
	return out
}
