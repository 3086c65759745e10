package authorization

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-base/metrics/testutil"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// authzCase is one request and what the cache's rules decide about it.
type authzCase struct {
	name                                     string
	user                                     user.Info
	scope                                    *kcpcache.Scope // nil: no scope in the context
	verb                                     string
	group, resource, subresource, objectName string // resource "": a non-resource request
	path                                     string
	want                                     authorizer.Decision
	rule                                     Rule // the rule that decides; "" for no opinion
}

func (c authzCase) request() (context.Context, authorizer.AttributesRecord) {
	ctx := context.Background()
	if c.scope != nil {
		ctx = kcpcache.WithScope(ctx, *c.scope)
	}
	attrs := authorizer.AttributesRecord{User: c.user, Verb: c.verb, Path: c.path}
	if c.resource != "" {
		attrs.ResourceRequest = true
		attrs.APIGroup, attrs.Resource, attrs.Subresource, attrs.Name = c.group, c.resource, c.subresource, c.objectName
	}
	return ctx, attrs
}

// check authorizes c's request and compares the decision and the rule
// its reason names.
func (c authzCase) check(t *testing.T) {
	t.Helper()
	ctx, attrs := c.request()
	got, reason, err := New().Authorize(ctx, attrs)
	if err != nil {
		t.Fatal(err)
	}
	if got != c.want {
		t.Fatalf("decision %v (%s), want %v", got, reason, c.want)
	}
	switch want := fmt.Sprintf("cache rule %q", c.rule); {
	case c.rule == "" && reason != "":
		t.Errorf("reason %q with no opinion, want none", reason)
	case c.rule != "" && reason != want && !strings.HasPrefix(reason, want+": "):
		t.Errorf("reason %q does not name rule %q", reason, c.rule)
	}
}

// identityCases: each identity in each kind of partition.
func identityCases() []authzCase {
	var (
		masters = &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}
		amber   = &user.DefaultInfo{Name: kcpcache.ShardUser("amber")}
		reader  = &user.DefaultInfo{Name: "dashboard", Groups: []string{kcpcache.ReadersGroup}}
		metrics = &user.DefaultInfo{Name: "prometheus", Groups: []string{kcpcache.MetricsReadersGroup}}
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
		{"masters write a partition", masters, scope("amber", "root"), "create", "apiexports", "", allow, RuleMasters},
		{"masters write CRDs unprefixed", masters, &system, "create", "crds", "", allow, RuleMasters},
		{"masters may not write CRDs in a partition", masters, scope("amber", "root"), "create", "crds", "", deny, RuleCRDWritesUnprefixed},
		{"masters may not store data in the system partition", masters, &system, "create", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"no scope is the system partition", masters, nil, "update", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"masters read the system partition", masters, &system, "list", "apiexports", "", allow, RuleMasters},
		{"masters use reserved names", masters, scope(kcpcache.SystemShard, "root"), "create", "apiexports", "", allow, RuleMasters},
		{"masters reach metrics", masters, &system, "get", "", "/metrics", allow, RuleMasters},
		{"masters take a backup", masters, &system, "get", "", kcpcache.BackupPath, allow, RuleMasters},
		{"shard may not take a backup", amber, &system, "get", "", kcpcache.BackupPath, deny, RuleBackupMastersOnly},
		{"reader may not take a backup", reader, &system, "get", "", kcpcache.BackupPath, deny, RuleBackupMastersOnly},
		{"peer may not take a backup", west, &system, "get", "", kcpcache.BackupPath, deny, RuleBackupMastersOnly},
		{"metrics reader may not take a backup", metrics, &system, "get", "", kcpcache.BackupPath, deny, RuleBackupMastersOnly},
		{"others may not take a backup", other, &system, "get", "", kcpcache.BackupPath, deny, RuleBackupMastersOnly},

		{"shard writes its partition", amber, scope("amber", "root"), "create", "apiexports", "", allow, RuleOwnPartitionWrites},
		{"shard updates its partition", amber, scope("amber", "org"), "update", "apiexports", "", allow, RuleOwnPartitionWrites},
		{"shard deletes collections in its partition", amber, scope("amber", "org"), "deletecollection", "apiexports", "", allow, RuleOwnPartitionWrites},
		{"shard may not write another's", amber, scope("blue", "root"), "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write through its wildcard", amber, scope("amber", "*"), "delete", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write through */*", amber, &wild, "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard writes its user-read partition", amber, scope("amber:readonly", "root"), "create", "apiexports", "", allow, RuleOwnUserReadWrites},
		{"shard writes system:admin in its user-read partition", amber, scope("amber:readonly", "system:admin"), "update", "apiexports", "", allow, RuleOwnUserReadWrites},
		{"shard deletes in its user-read partition", amber, scope("amber:readonly", "org"), "delete", "apiexports", "", allow, RuleOwnUserReadWrites},
		{"shard may not write another's user-read partition", amber, scope("blue:readonly", "root"), "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write through its user-read wildcard", amber, scope("amber:readonly", "*"), "deletecollection", "apiexports", "", deny, RuleOwnPartition},
		{"shard may not write a partition named like its own plus a suffix", amber, scope("amber:readonlyx", "root"), "create", "apiexports", "", deny, RuleOwnPartition},
		{"shard reads another's user-read partition", amber, scope("blue:readonly", "root"), "list", "apiexports", "", allow, RulePartitionReads},
		{"reader may not write a user-read partition", reader, scope("amber:readonly", "root"), "create", "apiexports", "", deny, RuleReadOnly},
		{"shard reads another's", amber, scope("blue", "root"), "get", "apiexports", "", allow, RulePartitionReads},
		{"shard lists */*", amber, &wild, "list", "apiexports", "", allow, RulePartitionReads},
		{"shard watches CRDs through */*", amber, &wild, "watch", "crds", "", allow, RulePartitionReads},
		{"shard may not write CRDs", amber, scope("amber", "root"), "create", "crds", "", deny, RuleCRDWritesUnprefixed},
		{"shard may not write CRDs unprefixed", amber, &system, "create", "crds", "", deny, RuleSystemPartition},
		{"shard may not read the system partition", amber, &system, "list", "apiexports", "", deny, RuleSystemPartition},
		{"shard may not use a reserved shard", amber, scope(kcpcache.SystemShard, "root"), "list", "apiexports", "", deny, RuleReservedName},
		{"shard may not use a reserved cluster", amber, scope("amber", kcpcache.SystemCluster), "create", "apiexports", "", deny, RuleReservedName},
		{"shard may not use system:cache clusters", amber, scope("amber", "system:cache-x"), "create", "apiexports", "", deny, RuleReservedName},
		{"shard may not impersonate", amber, scope("amber", "root"), "impersonate", "users", "", deny, RuleReadOnly},
		{"shard discovers", amber, scope("amber", "root"), "get", "", "/apis", allow, RuleDiscovery},
		{"shard: no opinion on metrics", amber, &system, "get", "", "/metrics", none, ""},

		{"reader lists */*", reader, &wild, "list", "apiexports", "", allow, RulePartitionReads},
		{"reader gets", reader, scope("amber", "root"), "get", "apiexports", "", allow, RulePartitionReads},
		{"reader may not create", reader, scope("amber", "root"), "create", "apiexports", "", deny, RuleReadOnly},

		{"reader asks a home revision", reader, &system, "get", "", kcpcache.RevisionPath, allow, RuleHomeRevision},
		{"shard asks a home revision", amber, &system, "get", "", kcpcache.RevisionPath, allow, RuleHomeRevision},
		{"shard may not post to the revision path", amber, &system, "post", "", kcpcache.RevisionPath, none, ""},

		{"peer asks a home revision", west, &system, "get", "", kcpcache.RevisionPath, allow, RuleHomeRevision},
		{"peer discovers", west, &system, "get", "", "/apis/apis.kcp.io/v1alpha1", allow, RuleDiscovery},
		{"peer: no opinion on metrics", west, &system, "get", "", "/metrics", none, ""},
		{"peer lists */*", west, &wild, "list", "apiexports", "", allow, RulePartitionReads},
		{"peer watches */*", west, &wild, "watch", "apiexports", "", allow, RulePartitionReads},
		{"peer gets", west, scope("amber", "root"), "get", "apiexports", "", allow, RulePartitionReads},
		{"peer watches CRDs through */*", west, &wild, "watch", "crds", "", allow, RulePartitionReads},
		{"peer may not create", west, scope("amber", "root"), "create", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not update", west, scope("west", "root"), "update", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not delete collections", west, scope("amber", "root"), "deletecollection", "apiexports", "", deny, RulePeerReadOnly},
		{"peer may not impersonate", west, scope("amber", "root"), "impersonate", "users", "", deny, RulePeerReadOnly},
		{"peer may not write the system partition", west, &system, "create", "apiexports", "", deny, RuleSystemPartitionCRDsOnly},
		{"peer may not read the system partition", west, &system, "list", "apiexports", "", deny, RuleSystemPartition},
		{"peer may not use a reserved shard", west, scope(kcpcache.SystemShard, "root"), "list", "apiexports", "", deny, RuleReservedName},
		{"a peer's name must be a DNS label", &user.DefaultInfo{Name: kcpcache.PeerUserPrefix + "West!"}, scope("amber", "root"), "list", "apiexports", "", none, ""},

		{"peer reads every home revision", west, &system, "get", "", kcpcache.RevisionsPath, allow, RulePeerHomeRevisions},
		{"peer reads home claims", west, &system, "get", "", kcpcache.HomesPath, allow, RulePeerHomeClaims},
		{"shard: no opinion on every home revision", amber, &system, "get", "", kcpcache.RevisionsPath, none, ""},
		{"reader: no opinion on home claims", reader, &system, "get", "", kcpcache.HomesPath, none, ""},
		{"reader may not impersonate", reader, scope("amber", "root"), "impersonate", "users", "", deny, RuleReadOnly},

		{"metrics reader reads metrics", metrics, &system, "get", "", "/metrics", allow, RuleMetricsReaders},
		{"metrics reader reads upstream's SLI metrics", metrics, &system, "get", "", "/metrics/slis", allow, RuleMetricsReaders},
		{"metrics reader reads readyz", metrics, &system, "get", "", "/readyz", allow, RuleMetricsReaders},
		{"metrics reader reads a readyz check", metrics, &system, "get", "", "/readyz/etcd", allow, RuleMetricsReaders},
		{"metrics reader reads livez", metrics, &system, "get", "", "/livez", allow, RuleMetricsReaders},
		{"metrics reader reads healthz", metrics, &system, "get", "", "/healthz/ping", allow, RuleMetricsReaders},
		{"metrics reader: no opinion on resetting metrics", metrics, &system, "delete", "", "/metrics", none, ""},
		{"metrics reader: no opinion on a path that only starts like metrics", metrics, &system, "get", "", "/metricsx", none, ""},
		{"metrics reader: no opinion on the revision path", metrics, &system, "get", "", kcpcache.RevisionPath, none, ""},
		{"metrics reader: no opinion on home claims", metrics, &system, "get", "", kcpcache.HomesPath, none, ""},
		{"metrics reader: no opinion on discovery", metrics, &system, "get", "", "/apis", none, ""},
		{"metrics reader: no opinion on reads", metrics, &wild, "list", "apiexports", "", none, ""},
		{"metrics reader may not write", metrics, scope("amber", "root"), "create", "apiexports", "", deny, RuleWriters},
		{"metrics reader may not read the system partition", metrics, &system, "list", "apiexports", "", deny, RuleSystemPartition},
		{"a metrics reader who is also a reader reads", &user.DefaultInfo{Name: "both", Groups: []string{kcpcache.MetricsReadersGroup, kcpcache.ReadersGroup}}, &wild, "list", "apiexports", "", allow, RulePartitionReads},

		{"others: no opinion on the revision path", other, &system, "get", "", kcpcache.RevisionPath, none, ""},
		{"others may not write", other, scope("amber", "root"), "create", "apiexports", "", deny, RuleWriters},
		{"others: no opinion on reads", other, scope("amber", "root"), "list", "apiexports", "", none, ""},
		{"others: no opinion on health", other, &system, "get", "", "/healthz", none, ""},
	}
	cases := make([]authzCase, 0, len(tests))
	for _, tt := range tests {
		c := authzCase{name: tt.name, user: tt.user, scope: tt.scope, verb: tt.verb, path: tt.path, want: tt.want, rule: tt.rule}
		switch tt.resource {
		case "":
		case "crds":
			c.group, c.resource = CRDResource.Group, CRDResource.Resource
		default:
			c.group, c.resource = "apis.kcp.io", tt.resource
		}
		cases = append(cases, c)
	}
	return cases
}

// Each identity gets what its rule allows, in each kind of partition, and
// every decision names its rule.
func TestEachIdentityGetsWhatItsRuleAllows(t *testing.T) {
	for _, c := range identityCases() {
		t.Run(c.name, c.check)
	}
}

// Every rule decides at least one case of the tables, so that each is
// reachable and tested where it lives.
func TestEveryRuleDecidesACase(t *testing.T) {
	decided := map[Rule]int{}
	for _, c := range append(identityCases(), heartbeatCases()...) {
		ctx, attrs := c.request()
		if _, rule, _ := decide(ctx, attrs); rule != "" {
			decided[rule]++
		}
	}
	for _, r := range rules {
		if decided[r.name] == 0 {
			t.Errorf("rule %q decides no case of the tests", r.name)
		}
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
