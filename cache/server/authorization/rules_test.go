package authorization

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-base/metrics/testutil"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Each identity gets what its rule allows, in each kind of partition, and a
// denial names the rule.
func TestEachIdentityGetsWhatItsRuleAllows(t *testing.T) {
	var (
		masters = &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
		amber   = &user.DefaultInfo{Name: kcpcache.ShardUser("amber")}
		reader  = &user.DefaultInfo{Name: "dashboard", Groups: []string{kcpcache.ReadersGroup}}
		other   = &user.DefaultInfo{Name: "someone"}
		west    = &user.DefaultInfo{Name: kcpcache.PeerUser("west")}
		system  = kcpcache.SystemScope
		wild    = kcpcache.Scope{Shard: "*", Cluster: "*"}
	)
	scope := func(shard, cluster string) *kcpcache.Scope { return &kcpcache.Scope{Shard: shard, Cluster: cluster} }
	const allow, deny, none = authorizer.DecisionAllow, authorizer.DecisionDeny, authorizer.DecisionNoOpinion
	tests := []struct {
		name     string
		user     user.Info
		scope    *kcpcache.Scope // nil: no scope in the context
		verb     string
		resource string // "crds" for CRDs; "" for a non-resource request
		path     string
		want     authorizer.Decision
		rule     Rule
	}{
		{"masters write a partition", masters, scope("amber", "root"), "create", "apiexports", "", allow, ""},
		{"masters write CRDs unprefixed", masters, &system, "create", "crds", "", allow, ""},
		{"masters may not write CRDs in a partition", masters, scope("amber", "root"), "create", "crds", "", deny, RuleCRDWritesUnprefixed},
		{"masters may not store data in the system partition", masters, &system, "create", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"no scope is the system partition", masters, nil, "update", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"masters read the system partition", masters, &system, "list", "apiexports", "", allow, ""},
		{"masters use reserved names", masters, scope(kcpcache.SystemShard, "root"), "create", "apiexports", "", allow, ""},
		{"masters reach metrics", masters, &system, "get", "", "/metrics", allow, ""},

		{"shard writes its partition", amber, scope("amber", "root"), "create", "apiexports", "", allow, ""},
		{"shard updates its partition", amber, scope("amber", "org"), "update", "apiexports", "", allow, ""},
		{"shard deletes collections in its partition", amber, scope("amber", "org"), "deletecollection", "apiexports", "", allow, ""},
		{"shard may not write another's", amber, scope("blue", "root"), "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write through its wildcard", amber, scope("amber", "*"), "delete", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write through */*", amber, &wild, "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard reads another's", amber, scope("blue", "root"), "get", "apiexports", "", allow, ""},
		{"shard lists */*", amber, &wild, "list", "apiexports", "", allow, ""},
		{"shard watches CRDs through */*", amber, &wild, "watch", "crds", "", allow, ""},
		{"shard may not write CRDs", amber, scope("amber", "root"), "create", "crds", "", deny, RuleCRDWritesUnprefixed},
		{"shard may not write CRDs unprefixed", amber, &system, "create", "crds", "", deny, RuleSystemPartition},
		{"shard may not read the system partition", amber, &system, "list", "apiexports", "", deny, RuleSystemPartition},
		{"shard may not use a reserved shard", amber, scope(kcpcache.SystemShard, "root"), "list", "apiexports", "", deny, RuleReservedName},
		{"shard may not use a reserved cluster", amber, scope("amber", kcpcache.SystemCluster), "create", "apiexports", "", deny, RuleReservedName},
		{"shard may not use system:cache clusters", amber, scope("amber", "system:cache-x"), "create", "apiexports", "", deny, RuleReservedName},
		{"shard may not impersonate", amber, scope("amber", "root"), "impersonate", "users", "", deny, RuleReadOnly},
		{"shard discovers", amber, scope("amber", "root"), "get", "", "/apis", allow, ""},
		{"shard: no opinion on metrics", amber, &system, "get", "", "/metrics", none, ""},

		{"reader lists */*", reader, &wild, "list", "apiexports", "", allow, ""},
		{"reader gets", reader, scope("amber", "root"), "get", "apiexports", "", allow, ""},
		{"reader may not create", reader, scope("amber", "root"), "create", "apiexports", "", deny, RuleReadOnly},

		{"reader asks a home revision", reader, &system, "get", "", kcpcache.RevisionPath, allow, ""},
		{"shard asks a home revision", amber, &system, "get", "", kcpcache.RevisionPath, allow, ""},
		{"shard may not post to the revision path", amber, &system, "post", "", kcpcache.RevisionPath, none, ""},

		{"peer asks a home revision", west, &system, "get", "", kcpcache.RevisionPath, allow, ""},
		{"peer discovers", west, &system, "get", "", "/apis/apis.kcp.io/v1alpha1", allow, ""},
		{"peer: no opinion on metrics", west, &system, "get", "", "/metrics", none, ""},
		{"peer lists */*", west, &wild, "list", "apiexports", "", allow, ""},
		{"peer watches */*", west, &wild, "watch", "apiexports", "", allow, ""},
		{"peer gets", west, scope("amber", "root"), "get", "apiexports", "", allow, ""},
		{"peer watches CRDs through */*", west, &wild, "watch", "crds", "", allow, ""},
		{"peer may not create", west, scope("amber", "root"), "create", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not update", west, scope("west", "root"), "update", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not delete collections", west, scope("amber", "root"), "deletecollection", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not impersonate", west, scope("amber", "root"), "impersonate", "users", "", deny, RulePeerReadOnly},
		{"peer may not write the system partition", west, &system, "create", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"peer may not read the system partition", west, &system, "list", "apiexports", "", deny, RuleSystemPartition},
		{"peer may not use a reserved shard", west, scope(kcpcache.SystemShard, "root"), "list", "apiexports", "", deny, RuleReservedName},
		{"a peer's name must be a DNS label", &user.DefaultInfo{Name: kcpcache.PeerUserPrefix + "West!"}, scope("amber", "root"), "list", "apiexports", "", none, ""},

		{"others: no opinion on the revision path", other, &system, "get", "", kcpcache.RevisionPath, none, ""},
		{"others may not write", other, scope("amber", "root"), "create", "apiexports", "", deny, RuleWriters},
		{"others: no opinion on reads", other, scope("amber", "root"), "list", "apiexports", "", none, ""},
		{"others: no opinion on health", other, &system, "get", "", "/healthz", none, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.scope != nil {
				ctx = kcpcache.WithScope(ctx, *tt.scope)
			}
			attrs := authorizer.AttributesRecord{User: tt.user, Verb: tt.verb, Path: tt.path}
			if tt.resource != "" {
				attrs.ResourceRequest = true
				attrs.APIGroup, attrs.Resource = "apis.kcp.io", tt.resource
				if tt.resource == "crds" {
					attrs.APIGroup, attrs.Resource = "apiextensions.k8s.io", "customresourcedefinitions"
				}
			}
			got, reason, err := New().Authorize(ctx, attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("decision %v (%s), want %v", got, reason, tt.want)
			}
			if tt.want == deny && !strings.Contains(reason, string(tt.rule)) {
				t.Errorf("reason %q does not name rule %q", reason, tt.rule)
			}
		})
	}
}

func TestDefaultDenyNamesItsRule(t *testing.T) {
	d, reason, err := NewDefaultDeny().Authorize(context.Background(), authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "x"}})
	if err != nil || d != authorizer.DecisionDeny || !strings.Contains(reason, string(RuleDefaultDeny)) {
		t.Fatalf("got %v %q %v", d, reason, err)
	}
}

// A denial is counted once, under its rule and no other. Not parallel: the
// counter is the process's, and no other test of this package may deny
// meanwhile.
func TestDenialsAreCountedByRule(t *testing.T) {
	registerMetrics()
	count := func(rule Rule) float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(denialsTotal.WithLabelValues(string(rule)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ownBefore, readOnlyBefore := count(RuleOwnPartition), count(RuleReadOnly)
	ctx := kcpcache.WithScope(context.Background(), kcpcache.Scope{Shard: "blue", Cluster: "org"})
	attrs := authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: kcpcache.ShardUser("amber")}, Verb: "create",
		ResourceRequest: true, APIGroup: "apis.kcp.io", Resource: "apiexports",
	}
	if d, reason, _ := New().Authorize(ctx, attrs); d != authorizer.DecisionDeny {
		t.Fatalf("amber creating in blue's partition: %v (%s), want a denial", d, reason)
	}
	if got := count(RuleOwnPartition) - ownBefore; got != 1 {
		t.Errorf("%s counted %v times for one denial, want 1", RuleOwnPartition, got)
	}
	if got := count(RuleReadOnly) - readOnlyBefore; got != 0 {
		t.Errorf("%s counted %v times, want 0: another rule denied", RuleReadOnly, got)
	}
}
