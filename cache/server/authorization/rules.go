package authorization

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Rule names a reason for a denial; it appears in the 403 message, the
// audit event and the metric label.
type Rule string

// AuditAnnotationPartition is the audit annotation naming the partition
// ("shard/cluster") a resource request addressed.
const AuditAnnotationPartition = "cache.kcp.io/partition"

// The rules that deny.
const (
	// RuleCRDWritesUnprefixed: CRDs are written only through the unprefixed
	// path, which stores them in the system partition where they are served.
	RuleCRDWritesUnprefixed Rule = "crd-writes-unprefixed-only"
	// RuleSystemPartitionCRDsOnly: the system partition holds CRDs, never
	// data objects.
	RuleSystemPartitionCRDsOnly Rule = "system-partition-crds-only"
	// RuleSystemPartition: only system:masters uses the system partition.
	RuleSystemPartition Rule = "system-partition-masters-only"
	// RuleReservedName: reserved shard and cluster names in partition paths.
	RuleReservedName Rule = "reserved-names-masters-only"
	// RuleOwnPartition: a shard writes only its own partition.
	RuleOwnPartition Rule = "shard-writes-own-partition-only"
	// RuleCRDWrites: only system:masters writes CRDs.
	RuleCRDWrites Rule = "crd-writes-masters-only"
	// RuleReadOnly: readers (and shards, for verbs other than writes) read.
	RuleReadOnly Rule = "read-only"
	// RuleWriters: only system:masters and the partition's shard write.
	RuleWriters Rule = "writes-masters-and-own-shard-only"
	// RuleDefaultDeny: anyone not covered by another rule.
	RuleDefaultDeny Rule = "default-deny"
	// RuleOwnHeartbeat: in the reserved heartbeat cluster, a shard writes
	// only its own heartbeat, by name.
	RuleOwnHeartbeat Rule = "shard-writes-own-heartbeat-only"
	// RulePeerReadOnly: a peer cache (kcpcache.PeerUser) reads what readers
	// read and writes nothing: peer caches mirror by pulling; they never
	// write to a peer.
	RulePeerReadOnly Rule = "peer-caches-read-only"
)

// CRDResource is the resource of CRDs, which are written only in the system
// partition.
var CRDResource = schema.GroupResource{Group: apiextensionsv1.GroupName, Resource: "customresourcedefinitions"}

var (
	readVerbs  = sets.New("get", "list", "watch")
	writeVerbs = sets.New("create", "update", "patch", "delete", "deletecollection")
)

// IsWrite reports whether verb changes stored objects.
func IsWrite(verb string) bool { return writeVerbs.Has(verb) }

// New returns the cache's rules as an authorizer. It allows or denies what
// it knows about and has no opinion otherwise, so that a path authorizer for
// health checks and a host's authorizer (for a mounted cache) can follow it
// in a union, with NewDefaultDeny last.
func New() authorizer.Authorizer {
	registerMetrics()
	return authorizer.AuthorizerFunc(authorize)
}

func authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, rule, reason := decide(ctx, a)
	if d == authorizer.DecisionDeny {
		return deny(rule, reason)
	}
	return d, reason, nil
}

func decide(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, Rule, string) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionNoOpinion, "", ""
	}
	masters := inGroup(u, user.SystemPrivilegedGroup)
	shard, isShard := kcpcache.ShardFromUser(u.GetName())
	reader := inGroup(u, kcpcache.ReadersGroup)
	peer, isPeer := kcpcache.PeerFromUser(u.GetName())
	verb := a.GetVerb()

	if !a.IsResourceRequest() {
		switch {
		case masters:
			return authorizer.DecisionAllow, "", ""
		case (isShard || reader || isPeer) && verb == "get" && isDiscoveryPath(a.GetPath()):
			return authorizer.DecisionAllow, "", "discovery"
		case (isShard || reader || isPeer) && verb == "get" && a.GetPath() == kcpcache.RevisionPath:
			// Mirrors ask a home for its revision; readers and shards
			// check the freshness of what they read.
			return authorizer.DecisionAllow, "", "home revision"
		case isPeer && verb == "get" && a.GetPath() == kcpcache.RevisionsPath:
			// Mirrors read every partition's revision for their lag.
			return authorizer.DecisionAllow, "", "home revisions"
		case isPeer && verb == "get" && a.GetPath() == kcpcache.HomesPath:
			// Peers read each other's home claims.
			return authorizer.DecisionAllow, "", "home claims"
		}
		return authorizer.DecisionNoOpinion, "", ""
	}

	scope, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		scope = kcpcache.SystemScope
	}
	// The partition filter strips the scope from the request URI before the
	// audit event is made; record where the request went.
	audit.AddAuditAnnotation(ctx, AuditAnnotationPartition, scope.String())
	isCRD := a.GetAPIGroup() == CRDResource.Group && a.GetResource() == CRDResource.Resource
	write := writeVerbs.Has(verb)

	// What no one may do, system:masters included.
	switch {
	case isCRD && write && !scope.IsSystem():
		return authorizer.DecisionDeny, RuleCRDWritesUnprefixed,
			fmt.Sprintf("CRDs are written only without the %s prefix, in the system partition where they are served; partition %s holds no CRDs", kcpcache.ServicePrefix, scope)
	case !isCRD && write && scope.IsSystem():
		return authorizer.DecisionDeny, RuleSystemPartitionCRDsOnly,
			fmt.Sprintf("the system partition holds only CRDs; write data objects below %s/shards/{shard}/clusters/{cluster}/", kcpcache.ServicePrefix)
	}
	if masters {
		return authorizer.DecisionAllow, "", ""
	}
	if isPeer && !readVerbs.Has(verb) {
		return authorizer.DecisionDeny, RulePeerReadOnly,
			fmt.Sprintf("peer cache %q reads (get, list, watch) and never writes: peer caches mirror by pulling; they never write to a peer", peer)
	}

	if isHeartbeat(a) && scope.Cluster == kcpcache.HeartbeatCluster && !kcpcache.IsReservedName(scope.Shard) && (isShard || reader || isPeer) {
		return decideHeartbeat(a, scope, shard, isShard)
	}
	switch {
	case scope.IsSystem():
		return authorizer.DecisionDeny, RuleSystemPartition,
			fmt.Sprintf("only system:masters uses the system partition (paths without the %s/shards/... prefix); read CRDs through a partition or wildcard path", kcpcache.ServicePrefix)
	case kcpcache.IsReservedName(scope.Shard) || kcpcache.IsReservedName(scope.Cluster):
		return authorizer.DecisionDeny, RuleReservedName,
			fmt.Sprintf("partition %s names a shard or cluster reserved for the cache itself", scope)
	case isShard && readVerbs.Has(verb), reader && readVerbs.Has(verb), isPeer && readVerbs.Has(verb):
		return authorizer.DecisionAllow, "", ""
	case isShard && write && isCRD:
		return authorizer.DecisionDeny, RuleCRDWrites, "only system:masters writes CRDs"
	case isShard && write && (scope.Shard != shard || scope.Cluster == kcpcache.Wildcard):
		return authorizer.DecisionDeny, RuleOwnPartition,
			fmt.Sprintf("shard %q writes only below %s", shard, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: "{cluster}"}))
	case isShard && write:
		return authorizer.DecisionAllow, "", ""
	case isShard:
		return authorizer.DecisionDeny, RuleReadOnly, fmt.Sprintf("shards read (get, list, watch) and write their own partition; %q is neither", verb)
	case reader:
		return authorizer.DecisionDeny, RuleReadOnly, fmt.Sprintf("the group %s only reads (get, list, watch)", kcpcache.ReadersGroup)
	case write:
		return authorizer.DecisionDeny, RuleWriters,
			fmt.Sprintf("only system:masters and the partition's shard (%s<shard>) write", kcpcache.ShardUserPrefix)
	}
	return authorizer.DecisionNoOpinion, "", ""
}

// isHeartbeat: a request for the shards' heartbeats themselves, not a
// subresource.
func isHeartbeat(a authorizer.Attributes) bool {
	return a.GetAPIGroup() == kcpcache.HeartbeatResource.Group && a.GetResource() == kcpcache.HeartbeatResource.Resource && a.GetSubresource() == ""
}

// decideHeartbeat is the one exception to the reserved names: in every
// partition's heartbeat cluster, shards, readers and peers read the heartbeats
// (consumers judge freshness by them), and shard s writes the heartbeat
// named s in its own partition, and nothing else. A create must name the
// object in the request (server-side apply or an update that creates, as
// the hook writes it): a POST names it only in the body, which the
// authorizer cannot see, so it is refused.
func decideHeartbeat(a authorizer.Attributes, scope kcpcache.Scope, shard string, isShard bool) (authorizer.Decision, Rule, string) {
	verb := a.GetVerb()
	switch {
	case readVerbs.Has(verb):
		return authorizer.DecisionAllow, "", ""
	case !isShard:
		return authorizer.DecisionDeny, RuleReadOnly, fmt.Sprintf("the group %s only reads (get, list, watch)", kcpcache.ReadersGroup)
	case verb != "deletecollection" && writeVerbs.Has(verb) && scope.Shard == shard && a.GetName() == shard:
		return authorizer.DecisionAllow, "", ""
	}
	return authorizer.DecisionDeny, RuleOwnHeartbeat,
		fmt.Sprintf("shard %q writes only its own heartbeat, %s/%s in %s, by name (server-side apply or update)",
			shard, kcpcache.HeartbeatResource.Resource, shard, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: kcpcache.HeartbeatCluster}))
}

// isDiscoveryPath: what kubectl and discovery clients read before a request.
func isDiscoveryPath(p string) bool {
	for _, prefix := range []string{"/api", "/apis", "/openapi"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return p == "/version"
}

func inGroup(u user.Info, group string) bool {
	for _, g := range u.GetGroups() {
		if g == group {
			return true
		}
	}
	return false
}
