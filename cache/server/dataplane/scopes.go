package dataplane

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
)

// scopeConfig is what every request scope shares.
type scopeConfig struct {
	authorizer          authorizer.Authorizer
	maxRequestBodyBytes int64
	// cbor answers in CBOR too (Config.ServeCBOR).
	cbor bool
}

// newRequestScopes builds one upstream RequestScope per served version of
// r. Each version decodes into and encodes from the same objects; only the
// version label differs. The field manager works on deduced types (there is
// no schema) and decides server-side apply; for a create or update of a copy
// in a partition, storage keeps the managedFields the request sent (the
// origin's), not the field manager's record of the writer (package
// partition).
func newRequestScopes(r Resource, t typing, tables rest.TableConvertor, c scopeConfig) (map[string]*handlers.RequestScope, error) {
	var opts []opaque.Option
	if c.cbor {
		opts = append(opts, opaque.WithCBOR())
	}
	serializer := opaque.NewSerializer(opaque.Type{Group: r.Group, Kind: r.Kind, ListKind: r.ListKind}, opts...)
	equivalent := runtime.NewEquivalentResourceRegistry()
	for _, v := range r.Versions {
		equivalent.RegisterKindFor(schema.GroupVersionResource{Group: r.Group, Version: v, Resource: r.Resource}, "", schema.GroupVersionKind{Group: r.Group, Version: v, Kind: r.Kind})
	}
	scopes := make(map[string]*handlers.RequestScope, len(r.Versions))
	for _, v := range r.Versions {
		gv := schema.GroupVersion{Group: r.Group, Version: v}
		fieldManager, err := managedfields.NewDefaultCRDFieldManager(managedfields.NewDeducedTypeConverter(), t, t, t, gv.WithKind(r.Kind), gv, "", nil)
		if err != nil {
			return nil, err
		}
		scopes[v] = &handlers.RequestScope{
			FieldManager:             fieldManager,
			Namer:                    handlers.ContextBasedNaming{Namer: meta.NewAccessor(), ClusterScoped: !r.Namespaced},
			Serializer:               serializer,
			ParameterCodec:           metainternalversionscheme.ParameterCodec,
			StandardSerializers:      serializer.SupportedMediaTypes(),
			Creater:                  t,
			Convertor:                t,
			Defaulter:                t,
			Typer:                    t,
			UnsafeConvertor:          t,
			Authorizer:               c.authorizer,
			EquivalentResourceMapper: equivalent,
			TableConvertor:           tables,
			Resource:                 gv.WithResource(r.Resource),
			Kind:                     gv.WithKind(r.Kind),
			HubGroupVersion:          gv,
			MetaGroupVersion:         metav1.SchemeGroupVersion,
			MaxRequestBodyBytes:      c.maxRequestBodyBytes,
		}
	}
	return scopes, nil
}
