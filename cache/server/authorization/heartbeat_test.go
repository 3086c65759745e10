package authorization

import (
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// heartbeatCases: the heartbeat exception to the reserved names.
func heartbeatCases() []authzCase {
	var (
		amber  = &user.DefaultInfo{Name: kcpcache.ShardUser("amber")}
		coral  = &user.DefaultInfo{Name: kcpcache.ShardUser("my:coral")}
		reader = &user.DefaultInfo{Name: "dashboard", Groups: []string{kcpcache.ReadersGroup}}
		other  = &user.DefaultInfo{Name: "someone"}
		west   = &user.DefaultInfo{Name: kcpcache.PeerUser("west")}
		hb     = kcpcache.HeartbeatResource
	)
	const allow, deny, none = authorizer.DecisionAllow, authorizer.DecisionDeny, authorizer.DecisionNoOpinion
	in := func(shard string) kcpcache.Scope {
		return kcpcache.Scope{Shard: shard, Cluster: kcpcache.HeartbeatCluster}
	}
	tests := []struct {
		name        string
		user        user.Info
		scope       kcpcache.Scope
		verb        string
		group, res  string
		subresource string
		objectName  string
		want        authorizer.Decision
		rule        Rule
	}{
		{"shard applies its own heartbeat", amber, in("amber"), "patch", hb.Group, hb.Resource, "", "amber", allow, RuleOwnHeartbeatWrites},
		{"shard creates its own heartbeat by name (apply)", amber, in("amber"), "create", hb.Group, hb.Resource, "", "amber", allow, RuleOwnHeartbeatWrites},
		{"shard with a colon in its name", coral, in("my:coral"), "update", hb.Group, hb.Resource, "", "my:coral", allow, RuleOwnHeartbeatWrites},
		{"shard deletes its own heartbeat", amber, in("amber"), "delete", hb.Group, hb.Resource, "", "amber", allow, RuleOwnHeartbeatWrites},
		{"shard applies its user-read heartbeat", amber, in("amber:readonly"), "patch", hb.Group, hb.Resource, "", "amber:readonly", allow, RuleOwnUserReadHeartbeatWrites},
		{"shard reads its user-read heartbeat first", amber, in("amber:readonly"), "get", hb.Group, hb.Resource, "", "amber:readonly", allow, RuleHeartbeatReads},
		{"shard may not write another's user-read heartbeat", amber, in("coral:readonly"), "patch", hb.Group, hb.Resource, "", "coral:readonly", deny, RuleOwnHeartbeat},
		{"shard may not write its own name in its user-read partition", amber, in("amber:readonly"), "patch", hb.Group, hb.Resource, "", "amber", deny, RuleOwnHeartbeat},
		{"shard may not write its user-read heartbeat in its own partition", amber, in("amber"), "patch", hb.Group, hb.Resource, "", "amber:readonly", deny, RuleOwnHeartbeat},
		{"shard may not POST a heartbeat (name unseen)", amber, in("amber"), "create", hb.Group, hb.Resource, "", "", deny, RuleOwnHeartbeat},
		{"shard may not write another name in its partition", amber, in("amber"), "patch", hb.Group, hb.Resource, "", "coral", deny, RuleOwnHeartbeat},
		{"shard may not write another's heartbeat", amber, in("coral"), "patch", hb.Group, hb.Resource, "", "coral", deny, RuleOwnHeartbeat},
		{"shard may not write its name in another's partition", amber, in("coral"), "patch", hb.Group, hb.Resource, "", "amber", deny, RuleOwnHeartbeat},
		{"shard may not impersonate there", amber, in("amber"), "impersonate", hb.Group, hb.Resource, "", "amber", deny, RuleReadOnly},
		{"shard may not delete the collection", amber, in("amber"), "deletecollection", hb.Group, hb.Resource, "", "", deny, RuleOwnHeartbeat},
		{"shard may not write through the wildcard", amber, in("*"), "patch", hb.Group, hb.Resource, "", "amber", deny, RuleOwnHeartbeat},
		{"shard may not write a subresource", amber, in("amber"), "patch", hb.Group, hb.Resource, "status", "amber", deny, RuleReservedName},
		{"shard may not store anything else there", amber, in("amber"), "create", "apis.kcp.io", "apiexports", "", "amber", deny, RuleReservedName},
		{"shard may not read anything else there", amber, in("amber"), "list", "apis.kcp.io", "apiexports", "", "", deny, RuleReservedName},
		{"heartbeats only in the heartbeat cluster", amber, kcpcache.Scope{Shard: "amber", Cluster: "system:cache:other"}, "patch", hb.Group, hb.Resource, "", "amber", deny, RuleReservedName},
		{"no heartbeats in the system shard", amber, kcpcache.Scope{Shard: kcpcache.SystemShard, Cluster: kcpcache.HeartbeatCluster}, "list", hb.Group, hb.Resource, "", "", deny, RuleReservedName},
		{"shard lists every heartbeat", amber, in("*"), "list", hb.Group, hb.Resource, "", "", allow, RuleHeartbeatReads},
		{"shard watches another's heartbeat", amber, in("coral"), "watch", hb.Group, hb.Resource, "", "", allow, RuleHeartbeatReads},
		{"reader lists every heartbeat", reader, in("*"), "list", hb.Group, hb.Resource, "", "", allow, RuleHeartbeatReads},
		{"reader gets a heartbeat", reader, in("amber"), "get", hb.Group, hb.Resource, "", "amber", allow, RuleHeartbeatReads},
		{"reader may not write a heartbeat", reader, in("amber"), "patch", hb.Group, hb.Resource, "", "amber", deny, RuleReadOnly},
		{"peer lists every heartbeat", west, in("*"), "list", hb.Group, hb.Resource, "", "", allow, RuleHeartbeatReads},
		{"peer watches a heartbeat", west, in("amber"), "watch", hb.Group, hb.Resource, "", "", allow, RuleHeartbeatReads},
		{"peer may not write a heartbeat", west, in("west"), "patch", hb.Group, hb.Resource, "", "west", deny, RulePeerReadOnly},
		{"others may not read heartbeats", other, in("*"), "list", hb.Group, hb.Resource, "", "", deny, RuleReservedName},
		{"others may not write heartbeats", other, in("amber"), "patch", hb.Group, hb.Resource, "", "amber", deny, RuleReservedName},
		{"shards write heartbeats elsewhere like any object", amber, kcpcache.Scope{Shard: "amber", Cluster: "root"}, "create", hb.Group, hb.Resource, "", "", allow, RuleOwnPartitionWrites},
		{"others: no opinion outside reserved names", other, kcpcache.Scope{Shard: "amber", Cluster: "root"}, "list", hb.Group, hb.Resource, "", "", none, ""},
	}
	cases := make([]authzCase, 0, len(tests))
	for _, tt := range tests {
		cases = append(cases, authzCase{name: tt.name, user: tt.user, scope: &tt.scope, verb: tt.verb,
			group: tt.group, resource: tt.res, subresource: tt.subresource, objectName: tt.objectName, want: tt.want, rule: tt.rule})
	}
	return cases
}

func TestHeartbeatRules(t *testing.T) {
	for _, c := range heartbeatCases() {
		t.Run(c.name, c.check)
	}
}
