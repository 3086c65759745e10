package bootstrap

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
)

// HeartbeatCRD declares the shards' heartbeats (kcpcache.HeartbeatResource):
// schema-less like every served type, with names that are path segments
// (shard names may hold ':'), and printer columns so that an operator sees
// every shard's freshness with
//
//	kubectl --server .../services/cache/shards/*/clusters/system:cache-heartbeat get shardheartbeats
//
// "Renewed" is the heartbeat's age (kubectl shows date columns as ages);
// "Epoch" is the cache epoch the shard last converged in, to compare with
// the Kcp-Cache-Epoch header (or kcp_cache_epoch_info).
func HeartbeatCRD() *apiextensionsv1.CustomResourceDefinition {
	gvr := kcpcache.HeartbeatResource
	crd := SchemalessCRD(CRDNames{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Kind: kcpcache.HeartbeatKind})
	if crd.Annotations == nil {
		crd.Annotations = map[string]string{}
	}
	crd.Annotations[dataplane.ValidateNameAnnotation] = string(dataplane.PathSegmentNames)
	crd.Spec.Versions[0].AdditionalPrinterColumns = []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Renewed", Type: "date", JSONPath: ".spec.renewTime", Description: "When the shard last renewed its heartbeat."},
		{Name: "Lease", Type: "integer", JSONPath: ".spec.leaseDurationSeconds", Description: "Seconds after a renewal that the heartbeat is current."},
		{Name: "Converged", Type: "boolean", JSONPath: ".spec.converged", Description: "Whether the shard's replication had caught up."},
		{Name: "Pending", Type: "integer", JSONPath: ".spec.pendingKeys", Description: "Changes not yet replicated."},
		{Name: "Objects", Type: "integer", JSONPath: ".spec.objects", Description: "Objects in the partition, all replicated types (per type: -o yaml, or kcp_cache_shard_objects)."},
		{Name: "Regressions", Type: "integer", JSONPath: ".spec.originRegressions", Priority: 1, Description: "Objects found older than their copies: the shard went back in time."},
		{Name: "Epoch", Type: "string", JSONPath: ".spec.epoch", Priority: 1, Description: "The cache epoch the shard last converged in."},
	}
	return crd
}
