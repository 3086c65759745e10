package server

import (
	"net/http"
	"time"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/cache/server/mirror"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// handlerChain is one server's handler chain: what New builds for it (the
// data plane, the epoch) around upstream's default chain.
type handlerChain struct {
	plane        *dataplane.Registry
	epoch        func() string
	bootstrapped sets.Set[string]
	// syntheticDelay holds every request back (kcp's --synthetic-delay).
	syntheticDelay time.Duration
	// mirror and cacheName place the cache in a hierarchy; nil and "" for
	// a cache on its own.
	mirror    *mirror.Mirror
	homes     *homes.Table
	cacheName string
	// storageRevision reads the local etcd's revision (header.go of the
	// mirror); nil without an etcd client.
	storageRevision mirror.StorageRevision
	// homeRevisions answers this cache's own revisions for the
	// home-revision header of the partitions whose home it is.
	homeRevisions mirror.PartitionRevisions
	// majority and member mark the stale reads of a member of an in-memory
	// group cut off from its majority; nil and "" without a group.
	majority *embeddedetcd.Majority
	member   string
	// memoryFull is the live heap at which creates are refused; 0: never.
	memoryFull uint64
	// minFreeDisk is the free space under the embedded etcd's directory
	// (read by disk) below which writes of partition objects are refused;
	// 0: never.
	minFreeDisk uint64
	disk        *filters.DiskSampler
}

// build is the server's BuildHandlerChainFunc: upstream's default chain
// between the partition filter (outermost: it names the partition before
// anything else reads the path) and the request guard (innermost: after
// authentication, authorization and request info, so its refusals are
// audited and counted). The data plane serves every declared type just
// inside the guard; its requests, the guard's refusals of them included, are
// recorded in upstream's request metrics just outside it.
func (h handlerChain) build(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
	guard := filters.GuardConfig{
		Codecs:              apiextensionsapiserver.Codecs,
		MaxRequestBodyBytes: maxObjectRequestBytes(gc.MaxRequestBodyBytes),
		CheckCRDDeletion:    removal.NewCRDDeletion(h.bootstrapped, gc.LoopbackClientConfig).Check,
	}
	chain := filters.WithRequestGuard(h.plane.Handler(apiHandler), guard)
	chain = filters.WithMemoryGuard(chain, h.memoryFull, filters.LiveHeap, apiextensionsapiserver.Codecs)
	if h.disk != nil {
		chain = filters.WithDiskGuard(chain, h.minFreeDisk, h.disk.Free, apiextensionsapiserver.Codecs)
	}
	if h.homes != nil {
		chain = mirror.WithHierarchy(chain, h.mirror, mirror.ServingConfig{CacheName: h.cacheName, Epoch: h.epoch, PartitionRevisions: h.homeRevisions, StorageRevision: h.storageRevision, PassesOnTo: h.homes.PassesOnTo, Codecs: apiextensionsapiserver.Codecs})
		chain = homes.WithWriteAdmission(chain, h.homes, apiextensionsapiserver.Codecs)
	}
	chain = h.plane.WithRequestMetrics(chain)
	chain = genericapiserver.DefaultBuildHandlerChain(chain, gc)
	chain = filters.WithPartition(chain, apiextensionsapiserver.Codecs)
	if h.majority != nil {
		chain = filters.WithMajorityAge(chain, h.member, h.majority.Lost)
	}
	chain = filters.WithEpoch(chain, h.epoch)
	chain = filters.WithCacheName(chain, h.cacheName)
	return filters.WithSyntheticDelay(chain, h.syntheticDelay)
}
