//go:build kcp

package server

import (
	"net/http"
	"regexp"
	"time"

	kcpapiextensionsclientset "github.com/kcp-dev/client-go/apiextensions/client"
	kcpapiextensionsinformers "github.com/kcp-dev/client-go/apiextensions/informers"
	"github.com/kcp-dev/logicalcluster/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	"k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The kcp build's apiextensions wiring (kcp's Kubernetes fork), for what
// differs from upstream (apiextensions_upstream.go): the fork's ExtraConfig
// has no webhook authentication resolver and needs a conversion factory; its
// client and informers are cluster-aware (requests under /clusters/<name>,
// objects indexed by their kcp.io/cluster); its CRD handler and discovery
// look CRDs up per logical cluster.

// crdResync is upstream apiextensions-apiserver's resync of its own CRD
// informers, which it builds itself in the upstream build.
const crdResync = 5 * time.Minute

// apiextensionsExtra is the fork's ExtraConfig of apiextensions-apiserver:
// custom resources stored through crdGetter, one master, no conversion (the
// cache stores objects as sent; the data plane serves every version without
// converting), and the cluster-aware client and informers on the loopback
// configuration, every cluster resolving to the system partition's CRDs.
func apiextensionsExtra(crdGetter generic.RESTOptionsGetter, gc *genericapiserver.RecommendedConfig) (apiextensionsapiserver.ExtraConfig, error) {
	loopback := rest.CopyConfig(gc.LoopbackClientConfig)
	loopback.Wrap(func(rt http.RoundTripper) http.RoundTripper { return withoutClusterPath{rt} })
	client, err := kcpapiextensionsclientset.NewForConfig(loopback)
	if err != nil {
		return apiextensionsapiserver.ExtraConfig{}, err
	}
	informers := kcpapiextensionsinformers.NewSharedInformerFactory(client, crdResync)
	return apiextensionsapiserver.ExtraConfig{
		CRDRESTOptionsGetter: crdGetter,
		// One cache server per etcd prefix: no need to delay establishing
		// CRDs for HA peers.
		MasterCount:           1,
		ConversionFactory:     noConversion{},
		Client:                client,
		Informers:             informers,
		ClusterAwareCRDLister: systemCRDs{systemCRDInformer(informers).Lister()},
	}, nil
}

// crdInformer is the informer of the CRDs apiextensions-apiserver serves:
// those of the system partition.
func crdInformer(a *apiextensionsapiserver.CustomResourceDefinitions) apiextensionsinformers.CustomResourceDefinitionInformer {
	return systemCRDInformer(a.Informers)
}

func systemCRDInformer(f kcpapiextensionsinformers.SharedInformerFactory) apiextensionsinformers.CustomResourceDefinitionInformer {
	return f.Apiextensions().V1().CustomResourceDefinitions().Cluster(logicalcluster.Name(kcpcache.SystemCluster))
}

// clusterPath is the /clusters/<name> segment the fork's cluster-aware
// clients insert before /api/ or /apis/.
var clusterPath = regexp.MustCompile(`/clusters/[^/]+(/apis?/)`)

// withoutClusterPath removes the /clusters/<name> segment from the loopback
// requests of the fork's cluster-aware CRD client, so that they reach the
// system partition, where the cache keeps its CRDs (a path that names no
// partition is served there; /clusters/... is not a cache path).
type withoutClusterPath struct{ next http.RoundTripper }

func (t withoutClusterPath) RoundTrip(req *http.Request) (*http.Response, error) {
	if p := clusterPath.ReplaceAllString(req.URL.Path, "$1"); p != req.URL.Path {
		req = req.Clone(req.Context())
		req.URL.Path = p
		req.URL.RawPath = ""
	}
	return t.next.RoundTrip(req)
}

// noConversion is the fork's conversion factory: no conversion, as kcp's own
// cache server. No CRD of the cache declares a conversion webhook.
type noConversion struct{}

func (noConversion) NewConverter(*apiextensionsv1.CustomResourceDefinition) (conversion.CRConverter, error) {
	return conversion.NewNOPConverter(), nil
}
