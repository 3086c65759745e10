package server

import (
	"context"
	"net/http"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
)

// TypesReadyCheckName is the readyz check that passes once every
// bootstrapped type's storage serves from a warm watch cache, and fails for
// as long as a bootstrapped declaration conflicts with stored data.
const TypesReadyCheckName = "kcp-cache-types"

// exportedTypes names the bootstrapped types whose objects declare identity
// resources; a type that is not bootstrapped is not followed.
func exportedTypes(crds []*apiextensionsv1.CustomResourceDefinition) dataplane.ExportedTypes {
	var types dataplane.ExportedTypes
	for _, crd := range crds {
		gr := dataplane.ResourceFromCRD(crd).GroupResource()
		switch gr {
		case schema.GroupResource{Group: "apis.kcp.io", Resource: "apiexports"}:
			types.APIExports = gr
		case schema.GroupResource{Group: "apis.kcp.io", Resource: "apiresourceschemas"}:
			types.APIResourceSchemas = gr
		case schema.GroupResource{Group: "cache.kcp.io", Resource: "cachedresources"}:
			types.CachedResources = gr
		case schema.GroupResource{Group: "cache.kcp.io", Resource: "clustercachedresources"}:
			types.ClusterCachedResources = gr
		}
	}
	return types
}

// bootstrappedResources are the types the data plane serves from the first
// moment, whatever their CRDs' state (New pins them before it builds the
// API server, so that their watch caches fill meanwhile).
func bootstrappedResources(crds []*apiextensionsv1.CustomResourceDefinition) []dataplane.Resource {
	out := make([]dataplane.Resource, 0, len(crds))
	for _, crd := range crds {
		out = append(out, dataplane.ResourceFromCRD(crd))
	}
	return out
}

// servePlane declares what the data plane serves beside the bootstrapped
// types (pinned by New): every other Established CRD as the informer sees
// it. It returns the loops that keep
// it so: the wait for the CRD informer's first list, and the source of the
// identity resources that cached APIExports and CachedResources declare.
func (s *Server) servePlane(ctx context.Context, crdInformer cache.SharedIndexInformer, crds []*apiextensionsv1.CustomResourceDefinition, boot *bootstrap.Installer) (crdsSynced, exported func(context.Context), err error) {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("dataplane"))
	if err := s.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck(TypesReadyCheckName, func(*http.Request) error {
		if err := boot.Check(); err != nil {
			return err
		}
		return s.plane.ReadinessCheck()
	})); err != nil {
		return nil, nil, err
	}
	if crdsSynced, err = s.plane.WatchCRDs(ctx, crdInformer); err != nil {
		return nil, nil, err
	}
	return crdsSynced, dataplane.NewExportSource(s.plane, exportedTypes(crds), s.etcdClient).Run, nil
}

// Types is the set of types the server serves; more can be registered at run
// time, with or without a CRD.
func (s *Server) Types() *dataplane.Registry { return s.plane }

// maxObjectRequestBytes bounds write bodies by what etcd can store, so that
// an object between etcd's limit and the server's request limit is refused
// with 413 before anything is decoded, not with an internal error from etcd.
func maxObjectRequestBytes(serverLimit int64) int64 {
	return min(serverLimit, int64(opaque.DefaultMaxObjectBytes))
}
