package fallback

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// DefaultMaxWatch bounds a watch served from the cache: the client then
// watches again, and reaches the shard as soon as it answers.
const DefaultMaxWatch = time.Minute

// Config is what a Fallback needs.
type Config struct {
	// Cache reaches the region's cache server (for kcp, the cache
	// kubeconfig the shards use). Its identity reads the fallback's
	// partitions on behalf of every user: the fallback decides who may read
	// what before it asks.
	Cache *rest.Config
	// Types are the user-read types served from the cache; nil means
	// kcpcache.UserReadTypes(). It must match what the shards push.
	Types []kcpcache.Type
	// PrivilegedGroups are the shard's --authorization-always-allow-groups;
	// nil means kcp's default, system:masters.
	PrivilegedGroups []string
	// MaxWatch bounds a watch served from the cache; 0 means DefaultMaxWatch.
	MaxWatch time.Duration
}

// Fallback answers reads of a lost shard's workspaces from the cache. One
// Fallback serves every shard of a front-proxy; it holds no state between
// requests besides its clients.
type Fallback struct {
	client           *client.ClusterClient
	cache            *rest.Config
	transport        http.RoundTripper
	types            map[schema.GroupResource]kcpcache.Type
	privilegedGroups []string
	maxWatch         time.Duration
	now              func() time.Time
}

// New validates cfg and returns a Fallback.
func New(cfg Config) (*Fallback, error) {
	if cfg.Cache == nil {
		return nil, errors.New("fallback: a cache config is required")
	}
	// Unthrottled: one request makes up to 20 reads; client-go's default
	// rate limit (5 per second) made each fallback answer take seconds.
	c, err := client.NewForConfig(client.Unthrottled(cfg.Cache))
	if err != nil {
		return nil, fmt.Errorf("fallback: cache client: %w", err)
	}
	// The served reads go out as they came in (their bodies are rewritten
	// on the way back), so they use a plain transport with the cache
	// config's credentials, not the client's path-rewriting one.
	transport, err := rest.TransportFor(cfg.Cache)
	if err != nil {
		return nil, fmt.Errorf("fallback: cache transport: %w", err)
	}
	f := &Fallback{
		client:           c,
		cache:            cfg.Cache,
		transport:        transport,
		types:            map[schema.GroupResource]kcpcache.Type{},
		privilegedGroups: cfg.PrivilegedGroups,
		maxWatch:         cfg.MaxWatch,
		now:              time.Now,
	}
	if f.privilegedGroups == nil {
		f.privilegedGroups = []string{user.SystemPrivilegedGroup}
	}
	if f.maxWatch <= 0 {
		f.maxWatch = DefaultMaxWatch
	}
	types := cfg.Types
	if types == nil {
		types = kcpcache.UserReadTypes()
	}
	for _, t := range types {
		f.types[t.GroupResource()] = t
	}
	return f, nil
}

// Target is where kcp's front-proxy sent a request: the shard and the
// logical cluster its index resolved the request's workspace path to.
type Target struct {
	Shard   string
	Cluster string
}
