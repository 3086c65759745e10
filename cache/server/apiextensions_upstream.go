//go:build !kcp

package server

import (
	noopoteltrace "go.opentelemetry.io/otel/trace/noop"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	"k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/webhook"
)

// The upstream build's apiextensions wiring; apiextensions_kcp.go is kcp's
// fork's, whose ExtraConfig and CRD informers differ.

// apiextensionsExtra is the ExtraConfig of apiextensions-apiserver: custom
// resources stored through crdGetter, one master, and the webhook
// conversion's authentication resolved with the loopback configuration.
func apiextensionsExtra(crdGetter generic.RESTOptionsGetter, gc *genericapiserver.RecommendedConfig) (apiextensionsapiserver.ExtraConfig, error) {
	return apiextensionsapiserver.ExtraConfig{
		CRDRESTOptionsGetter: crdGetter,
		// One cache server per etcd prefix: no need to delay establishing
		// CRDs for HA peers.
		MasterCount:         1,
		AuthResolverWrapper: webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil, gc.LoopbackClientConfig, noopoteltrace.NewTracerProvider()),
	}, nil
}

// crdInformer is the informer of the CRDs apiextensions-apiserver serves.
func crdInformer(a *apiextensionsapiserver.CustomResourceDefinitions) apiextensionsinformers.CustomResourceDefinitionInformer {
	return a.Informers.Apiextensions().V1().CustomResourceDefinitions()
}
