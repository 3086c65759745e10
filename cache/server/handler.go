package server

import (
	"net/http"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache/server/filters"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// buildHandlerChain is the server's BuildHandlerChainFunc: upstream's default
// chain between the partition filter (outermost: it names the partition
// before anything else reads the path) and the request guard (innermost:
// after authentication, authorization and request info, so its refusals
// are audited and counted). A stand-in's Mount routes /services/cache/ to
// its mounted cache in front of all of it. The data plane serves every
// declared type just inside the guard.
//
// New installs it: the chain needs the data plane Complete built.
func (c *completedConfig) buildHandlerChain(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
	guard := filters.GuardConfig{
		Codecs:              apiextensionsapiserver.Codecs,
		MaxRequestBodyBytes: maxObjectRequestBytes(gc.MaxRequestBodyBytes),
		ProtectedCRDs:       sets.New[string](),
		CRDInUse:            removal.NewCRDInUseChecker(gc.LoopbackClientConfig),
	}
	for _, crd := range c.Extra.BootstrapCRDs {
		guard.ProtectedCRDs.Insert(crd.Name)
	}
	build := func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
		h := filters.WithRequestGuard(c.plane.Handler(apiHandler), guard)
		h = genericapiserver.DefaultBuildHandlerChain(h, gc)
		h = filters.WithPartition(h, apiextensionsapiserver.Codecs, c.StandIn.PathScoper)
		h = filters.WithEpoch(h, c.epoch.Epoch)
		return filters.WithSyntheticDelay(h, c.Extra.SyntheticDelay)
	}
	if c.StandIn.Mount != nil {
		build = c.StandIn.Mount.WrapHandlerChain(build)
	}
	return build(apiHandler, gc)
}
