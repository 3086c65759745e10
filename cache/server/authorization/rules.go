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

// Rule names one rule of the cache's policy. Every decision names its rule
// in the audit event's reason (authorization.k8s.io/reason); a denial names
// it in the 403 message and the metric label too.
type Rule string

// AuditAnnotationPartition is the audit annotation naming the partition
// ("shard/cluster") a resource request addressed.
const AuditAnnotationPartition = "cache.kcp.io/partition"

// The rules, in the order they are tried (see rules); RuleDefaultDeny is
// the union's last authorizer (NewDefaultDeny).
const (
	// RuleCRDWritesUnprefixed: CRDs are written only through the unprefixed
	// path, which stores them in the system partition where they are served.
	RuleCRDWritesUnprefixed Rule = "crd-writes-unprefixed-only"
	// RuleSystemPartitionCRDsOnly: the system partition holds CRDs, never
	// data objects.
	RuleSystemPartitionCRDsOnly Rule = "system-partition-crds-only"
	// RuleMasters: system:masters may do everything else.
	RuleMasters Rule = "masters"
	// RuleBackupMastersOnly: only system:masters takes a backup.
	RuleBackupMastersOnly Rule = "backup-masters-only"
	// RuleDiscovery: shards, readers and peers read discovery and /version.
	RuleDiscovery Rule = "discovery"
	// RuleHomeRevision: shards, readers and peers ask a home its revision.
	RuleHomeRevision Rule = "home-revision"
	// RulePeerHomeRevisions: peers read every partition's revision.
	RulePeerHomeRevisions Rule = "peer-home-revisions"
	// RulePeerHomeClaims: peers read each other's home claims.
	RulePeerHomeClaims Rule = "peer-home-claims"
	// RuleMetricsReaders: the metrics readers group reads /metrics and the
	// health endpoints.
	RuleMetricsReaders Rule = "metrics-readers"
	// RulePeerReadOnly: a peer cache (kcpcache.PeerUser) reads what readers
	// read and writes nothing: peer caches mirror by pulling; they never
	// write to a peer.
	RulePeerReadOnly Rule = "peer-caches-read-only"
	// RuleReadOnly: readers read; shards read and write.
	RuleReadOnly Rule = "read-only"
	// RuleHeartbeatReads: shards, readers and peers read every partition's
	// heartbeat.
	RuleHeartbeatReads Rule = "heartbeat-reads"
	// RuleOwnHeartbeatWrites: a shard writes its own heartbeat, by name.
	RuleOwnHeartbeatWrites Rule = "own-heartbeat-writes"
	// RuleOwnUserReadHeartbeatWrites: a shard writes the heartbeat of its
	// user-read partition (kcpcache.UserReadPartition), by name.
	RuleOwnUserReadHeartbeatWrites Rule = "own-user-read-heartbeat-writes"
	// RuleOwnHeartbeat: in the reserved heartbeat cluster, a shard writes
	// only its own heartbeat, by name.
	RuleOwnHeartbeat Rule = "shard-writes-own-heartbeat-only"
	// RuleSystemPartition: only system:masters uses the system partition.
	RuleSystemPartition Rule = "system-partition-masters-only"
	// RuleReservedName: reserved shard and cluster names in partition paths.
	RuleReservedName Rule = "reserved-names-masters-only"
	// RulePartitionReads: shards, readers and peers read every partition.
	RulePartitionReads Rule = "partition-reads"
	// RuleOwnUserReadWrites: a shard writes its user-read partition
	// (kcpcache.UserReadPartition), where what users read in its marked
	// workspaces is pushed.
	RuleOwnUserReadWrites Rule = "own-user-read-partition-writes"
	// RuleOwnPartition: a shard writes only its own partition.
	RuleOwnPartition Rule = "shard-writes-own-partition-only"
	// RuleOwnPartitionWrites: a shard writes its own partition.
	RuleOwnPartitionWrites Rule = "own-partition-writes"
	// RuleWriters: only system:masters and the partition's shard write.
	RuleWriters Rule = "writes-masters-and-own-shard-only"
	// RuleDefaultDeny: anyone not covered by another rule.
	RuleDefaultDeny Rule = "default-deny"
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
	switch d {
	case authorizer.DecisionDeny:
		return deny(rule, reason)
	case authorizer.DecisionAllow:
		return d, fmt.Sprintf("cache rule %q", rule), nil
	}
	return d, "", nil
}

// decide tries the rules in order; the first that matches decides.
func decide(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, Rule, string) {
	r, ok := newRequest(ctx, a)
	if !ok {
		return authorizer.DecisionNoOpinion, "", ""
	}
	for _, rule := range rules {
		if !rule.matches(r) {
			continue
		}
		if rule.decision == authorizer.DecisionDeny {
			return rule.decision, rule.name, rule.reason(r)
		}
		return rule.decision, rule.name, ""
	}
	return authorizer.DecisionNoOpinion, "", ""
}

// request is what the rules look at, worked out once per request.
type request struct {
	attrs    authorizer.Attributes
	resource bool // a resource request; otherwise a non-resource path
	path     string
	verb     string
	read     bool // get, list, watch
	write    bool // create, update, patch, delete, deletecollection

	masters       bool
	reader        bool
	metricsReader bool
	isShard       bool
	shard         string
	isPeer        bool
	peer          string
	// anyReader: a shard, a reader or a peer, the identities that read.
	anyReader bool

	// Resource requests only.
	scope kcpcache.Scope
	crd   bool
	// heartbeat: a heartbeat itself (not a subresource) in a shard's
	// heartbeat cluster, the one exception to the reserved names.
	heartbeat bool
}

func newRequest(ctx context.Context, a authorizer.Attributes) (*request, bool) {
	u := a.GetUser()
	if u == nil {
		return nil, false
	}
	r := &request{
		attrs:         a,
		resource:      a.IsResourceRequest(),
		path:          a.GetPath(),
		verb:          a.GetVerb(),
		masters:       inGroup(u, user.SystemPrivilegedGroup),
		reader:        inGroup(u, kcpcache.ReadersGroup),
		metricsReader: inGroup(u, kcpcache.MetricsReadersGroup),
	}
	r.read, r.write = readVerbs.Has(r.verb), writeVerbs.Has(r.verb)
	r.shard, r.isShard = kcpcache.ShardFromUser(u.GetName())
	r.peer, r.isPeer = kcpcache.PeerFromUser(u.GetName())
	r.anyReader = r.isShard || r.reader || r.isPeer
	if !r.resource {
		return r, true
	}
	scope, ok := kcpcache.ScopeFrom(ctx)
	if !ok {
		scope = kcpcache.SystemScope
	}
	r.scope = scope
	// The partition filter strips the scope from the request URI before the
	// audit event is made; record where the request went.
	audit.AddAuditAnnotation(ctx, AuditAnnotationPartition, scope.String())
	r.crd = a.GetAPIGroup() == CRDResource.Group && a.GetResource() == CRDResource.Resource
	r.heartbeat = a.GetAPIGroup() == kcpcache.HeartbeatResource.Group && a.GetResource() == kcpcache.HeartbeatResource.Resource &&
		a.GetSubresource() == "" && scope.Cluster == kcpcache.HeartbeatCluster && !kcpcache.IsReservedName(scope.Shard)
	return r, true
}

// policyRule is one rule: how it matches a request, what it decides, and
// how docs/security.md describes it (who and requests, in Markdown).
type policyRule struct {
	name     Rule
	decision authorizer.Decision
	who      string
	requests string
	matches  func(r *request) bool
	// reason explains a denial; nil for a rule that allows.
	reason func(r *request) string
}

// rules is the cache's policy, tried in order. The first rule that matches
// decides; a request that none matches gets no opinion, and goes on to the
// next authorizer of the union. docs/security.md shows this table
// (PolicyDoc).
var rules = []policyRule{
	{
		name: RuleCRDWritesUnprefixed, decision: authorizer.DecisionDeny,
		who:      "everyone, `system:masters` included",
		requests: "writes of CRDs through a partition path (`" + kcpcache.ServicePrefix + "/shards/...`): one stored there would never be served and could never finish deleting; CRDs are written without the prefix",
		matches:  func(r *request) bool { return r.resource && r.crd && r.write && !r.scope.IsSystem() },
		reason: func(r *request) string {
			return fmt.Sprintf("CRDs are written only without the %s prefix, in the system partition where they are served; partition %s holds no CRDs", kcpcache.ServicePrefix, r.scope)
		},
	},
	{
		name: RuleSystemPartitionCRDsOnly, decision: authorizer.DecisionDeny,
		who:      "everyone, `system:masters` included",
		requests: "writes of anything but CRDs in the system partition (a path without `" + kcpcache.ServicePrefix + "/shards/...`): data objects are written below `" + kcpcache.ServicePrefix + "/shards/{shard}/clusters/{cluster}/`",
		matches:  func(r *request) bool { return r.resource && !r.crd && r.write && r.scope.IsSystem() },
		reason: func(r *request) string {
			return fmt.Sprintf("the system partition holds only CRDs; write data objects below %s/shards/{shard}/clusters/{cluster}/", kcpcache.ServicePrefix)
		},
	},
	{
		name: RuleMasters, decision: authorizer.DecisionAllow,
		who:      "`" + user.SystemPrivilegedGroup + "`",
		requests: "everything else",
		matches:  func(r *request) bool { return r.masters },
	},
	{
		name: RuleBackupMastersOnly, decision: authorizer.DecisionDeny,
		who:      "everyone else",
		requests: "`" + kcpcache.BackupPath + "`: a backup holds every partition and the cache's own records; for a mounted cache, no host's authorizer may grant it",
		matches:  func(r *request) bool { return !r.resource && r.path == kcpcache.BackupPath },
		reason: func(*request) string {
			return "only system:masters takes a backup: it holds every partition of the cache"
		},
	},
	{
		name: RuleDiscovery, decision: authorizer.DecisionAllow,
		who:      "shards, readers, peers",
		requests: "GET `/api`, `/apis`, `/openapi` and below, `/version`",
		matches:  func(r *request) bool { return !r.resource && r.anyReader && r.verb == "get" && isDiscoveryPath(r.path) },
	},
	{
		name: RuleHomeRevision, decision: authorizer.DecisionAllow,
		who:      "shards, readers, peers",
		requests: "GET `" + kcpcache.RevisionPath + "`: mirrors ask a home its revision; shards and readers check the freshness of what they read",
		matches: func(r *request) bool {
			return !r.resource && r.anyReader && r.verb == "get" && r.path == kcpcache.RevisionPath
		},
	},
	{
		name: RulePeerHomeRevisions, decision: authorizer.DecisionAllow,
		who:      "peers",
		requests: "GET `" + kcpcache.RevisionsPath + "`: a mirror's lag behind its home",
		matches: func(r *request) bool {
			return !r.resource && r.isPeer && r.verb == "get" && r.path == kcpcache.RevisionsPath
		},
	},
	{
		name: RulePeerHomeClaims, decision: authorizer.DecisionAllow,
		who:      "peers",
		requests: "GET `" + kcpcache.HomesPath + "`: each other's home claims",
		matches: func(r *request) bool {
			return !r.resource && r.isPeer && r.verb == "get" && r.path == kcpcache.HomesPath
		},
	},
	{
		name: RuleMetricsReaders, decision: authorizer.DecisionAllow,
		who:      "metrics readers",
		requests: "GET `" + kcpcache.MetricsPath + "` and below, " + healthPathsDoc() + " and their checks; nothing else is theirs",
		matches: func(r *request) bool {
			return !r.resource && r.metricsReader && r.verb == "get" && (kcpcache.IsMetricsPath(r.path) || kcpcache.IsHealthPath(r.path))
		},
	},
	{
		name: RulePeerReadOnly, decision: authorizer.DecisionDeny,
		who:      "peers",
		requests: "every verb but get, list, watch: mirrors pull, they never write to a peer",
		matches:  func(r *request) bool { return r.resource && r.isPeer && !r.read },
		reason: func(r *request) string {
			return fmt.Sprintf("peer cache %q reads (get, list, watch) and never writes: peer caches mirror by pulling; they never write to a peer", r.peer)
		},
	},
	{
		name: RuleReadOnly, decision: authorizer.DecisionDeny,
		who:      "readers; shards",
		requests: "readers: every verb but get, list, watch; shards: verbs that neither read nor write (impersonate, ...)",
		matches: func(r *request) bool {
			return r.resource && ((r.isShard && !r.read && !r.write) || (r.reader && !r.isShard && !r.read))
		},
		reason: func(r *request) string {
			if r.isShard {
				return fmt.Sprintf("shards read (get, list, watch) and write their own partition; %q is neither", r.verb)
			}
			return fmt.Sprintf("the group %s only reads (get, list, watch)", kcpcache.ReadersGroup)
		},
	},
	{
		name: RuleHeartbeatReads, decision: authorizer.DecisionAllow,
		who:      "shards, readers, peers",
		requests: "get, list, watch of `" + kcpcache.HeartbeatResource.Resource + "` in `" + kcpcache.ShardsSegment + "/<s>/" + kcpcache.ClustersSegment + "/" + kcpcache.HeartbeatCluster + "`, `<s>` any shard or `*`: the one exception to the reserved names",
		matches:  func(r *request) bool { return r.resource && r.heartbeat && r.anyReader && r.read },
	},
	{
		name: RuleOwnHeartbeatWrites, decision: authorizer.DecisionAllow,
		who:      "shard `<s>`",
		requests: "writes but deletecollection of `" + kcpcache.HeartbeatResource.Resource + "/<s>` in `" + kcpcache.ShardsSegment + "/<s>/" + kcpcache.ClustersSegment + "/" + kcpcache.HeartbeatCluster + "`, by name (server-side apply or update; a POST names it only in its body, which the authorizer cannot see)",
		matches: func(r *request) bool {
			return r.resource && r.heartbeat && r.isShard && r.write && r.verb != "deletecollection" &&
				r.scope.Shard == r.shard && r.attrs.GetName() == r.shard
		},
	},
	{
		name: RuleOwnUserReadHeartbeatWrites, decision: authorizer.DecisionAllow,
		who:      "shard `<s>`",
		requests: "the same writes of `" + kcpcache.HeartbeatResource.Resource + "/<s>" + kcpcache.UserReadSuffix + "` in `" + kcpcache.ShardsSegment + "/<s>" + kcpcache.UserReadSuffix + "/" + kcpcache.ClustersSegment + "/" + kcpcache.HeartbeatCluster + "`: the heartbeat of its user-read partition",
		matches: func(r *request) bool {
			partition := kcpcache.UserReadPartition(r.shard)
			return r.resource && r.heartbeat && r.isShard && r.write && r.verb != "deletecollection" &&
				r.scope.Shard == partition && r.attrs.GetName() == partition
		},
	},
	{
		name: RuleOwnHeartbeat, decision: authorizer.DecisionDeny,
		who:      "shards",
		requests: "any other write of heartbeats in a heartbeat cluster",
		matches:  func(r *request) bool { return r.resource && r.heartbeat && r.isShard },
		reason: func(r *request) string {
			partition := kcpcache.UserReadPartition(r.shard)
			return fmt.Sprintf("shard %q writes only its own heartbeats, %s/%s in %s and %s/%s in %s, by name (server-side apply or update)",
				r.shard, kcpcache.HeartbeatResource.Resource, r.shard, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: r.shard, Cluster: kcpcache.HeartbeatCluster}),
				kcpcache.HeartbeatResource.Resource, partition, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: partition, Cluster: kcpcache.HeartbeatCluster}))
		},
	},
	{
		name: RuleSystemPartition, decision: authorizer.DecisionDeny,
		who:      "everyone else",
		requests: "the system partition (paths without `" + kcpcache.ServicePrefix + "/shards/...`); CRDs are read through a partition or wildcard path",
		matches:  func(r *request) bool { return r.resource && r.scope.IsSystem() },
		reason: func(*request) string {
			return fmt.Sprintf("only system:masters uses the system partition (paths without the %s/shards/... prefix); read CRDs through a partition or wildcard path", kcpcache.ServicePrefix)
		},
	},
	{
		name: RuleReservedName, decision: authorizer.DecisionDeny,
		who:      "everyone else",
		requests: "partition paths naming a reserved shard or cluster: names starting with `system:cache` (`" + kcpcache.SystemShard + "`, `" + kcpcache.HeartbeatCluster + "`, ...), or `" + kcpcache.SystemCluster + "`",
		matches: func(r *request) bool {
			return r.resource && (kcpcache.IsReservedName(r.scope.Shard) || kcpcache.IsReservedName(r.scope.Cluster))
		},
		reason: func(r *request) string {
			return fmt.Sprintf("partition %s names a shard or cluster reserved for the cache itself", r.scope)
		},
	},
	{
		name: RulePartitionReads, decision: authorizer.DecisionAllow,
		who:      "shards, readers, peers",
		requests: "get, list, watch in every partition and through every wildcard",
		matches:  func(r *request) bool { return r.resource && r.anyReader && r.read },
	},
	{
		name: RuleOwnUserReadWrites, decision: authorizer.DecisionAllow,
		who:      "shard `<s>`",
		requests: "create, update, patch, delete, deletecollection below `" + kcpcache.ShardsSegment + "/<s>" + kcpcache.UserReadSuffix + "/" + kcpcache.ClustersSegment + "/<cluster>/`, its user-read partition (what users read in its marked workspaces); no wildcard cluster",
		matches: func(r *request) bool {
			return r.resource && r.isShard && r.write && r.scope.Shard == kcpcache.UserReadPartition(r.shard) && r.scope.Cluster != kcpcache.Wildcard
		},
	},
	{
		name: RuleOwnPartition, decision: authorizer.DecisionDeny,
		who:      "shard `<s>`",
		requests: "writes outside `" + kcpcache.ShardsSegment + "/<s>/" + kcpcache.ClustersSegment + "/<cluster>` and its user-read partition, a wildcard cluster included",
		matches: func(r *request) bool {
			return r.resource && r.isShard && r.write && (r.scope.Shard != r.shard || r.scope.Cluster == kcpcache.Wildcard)
		},
		reason: func(r *request) string {
			return fmt.Sprintf("shard %q writes only below %s and %s", r.shard, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: r.shard, Cluster: "{cluster}"}),
				kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: kcpcache.UserReadPartition(r.shard), Cluster: "{cluster}"}))
		},
	},
	{
		name: RuleOwnPartitionWrites, decision: authorizer.DecisionAllow,
		who:      "shard `<s>`",
		requests: "create, update, patch, delete, deletecollection below `" + kcpcache.ShardsSegment + "/<s>/" + kcpcache.ClustersSegment + "/<cluster>/`",
		matches:  func(r *request) bool { return r.resource && r.isShard && r.write },
	},
	{
		name: RuleWriters, decision: authorizer.DecisionDeny,
		who:      "everyone else",
		requests: "writes",
		matches:  func(r *request) bool { return r.resource && r.write },
		reason: func(*request) string {
			return fmt.Sprintf("only system:masters and the partition's shard (%s<shard>) write", kcpcache.ShardUserPrefix)
		},
	},
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

// healthPathsDoc lists the health endpoints in Markdown.
func healthPathsDoc() string {
	paths := make([]string, 0, len(kcpcache.HealthPaths))
	for _, p := range kcpcache.HealthPaths {
		paths = append(paths, "`"+p+"`")
	}
	return strings.Join(paths, ", ")
}

func inGroup(u user.Info, group string) bool {
	for _, g := range u.GetGroups() {
		if g == group {
			return true
		}
	}
	return false
}
