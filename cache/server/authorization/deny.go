package authorization

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

var (
	denialsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "kcp_cache",
		Subsystem:      "authorization",
		Name:           "denials_total",
		Help:           "Requests the cache's authorizer denied, by rule.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"rule"})
	registerOnce sync.Once
)

// registerMetrics registers the denial counter with the legacy registry
// (served at /metrics) once, when the first authorizer that counts denials
// is made: the one way metrics are registered in this project.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(denialsTotal) })
}

// deny counts a denial and words its reason so that the rule is visible in
// the 403 Status ("... forbidden: ...: <reason>") and in the audit event.
func deny(rule Rule, reason string) (authorizer.Decision, string, error) {
	denialsTotal.WithLabelValues(string(rule)).Inc()
	return authorizer.DecisionDeny, fmt.Sprintf("cache rule %q: %s", rule, reason), nil
}

// NewDefaultDeny goes last in the authorizer union: whoever no authorizer
// before it allowed is denied with a named rule instead of upstream's
// reasonless "no opinion" refusal.
func NewDefaultDeny() authorizer.Authorizer {
	registerMetrics()
	return authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return deny(RuleDefaultDeny, "only system:masters, shards ("+kcpcache.ShardUserPrefix+"<shard>), the group "+kcpcache.ReadersGroup+
			" and peer caches ("+kcpcache.PeerUserPrefix+"<cache>) use the cache; the group "+kcpcache.MetricsReadersGroup+
			" reads "+kcpcache.MetricsPath+" and health; anyone may reach /healthz, /livez, /readyz and /version")
	})
}

// defaultDeny is NewDefaultDeny's row in docs/security.md.
var defaultDeny = policyRule{
	name: RuleDefaultDeny, decision: authorizer.DecisionDeny,
	who:      "everyone",
	requests: "everything no authorizer before it allowed",
}
