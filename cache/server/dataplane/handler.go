package dataplane

import (
	"fmt"
	"mime"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
)

// statusCodecs encodes the Status of requests that reach no type.
var statusCodecs = opaque.NewSerializer(opaque.Type{})

// apiextensionsGroup is served by apiextensions-apiserver itself (the CRD
// API); every other resource request is ours or unknown.
const apiextensionsGroup = "apiextensions.k8s.io"

// retryAfterSeconds is what a client is told to wait while a type warms up.
const retryAfterSeconds = 1

// patchTypes are the patches a schema-less object supports; strategic merge
// needs a Go type.
var patchTypes = []string{string(types.JSONPatchType), string(types.MergePatchType), string(types.ApplyYAMLPatchType)}

// Handler serves the registry's types and passes every other request to
// delegate. It must run inside the default handler chain: it reads the
// request info, and authentication and authorization have happened.
func (r *Registry) Handler(delegate http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok || !info.IsResourceRequest || info.APIGroup == apiextensionsGroup {
			delegate.ServeHTTP(w, req)
			return
		}
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
		gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
		s, destroyed := r.lookup(gr)
		if destroyed {
			unavailable(w, req, gv, gr, "the cache server is shutting down")
			return
		}
		if s == nil {
			if !r.synced() {
				unavailable(w, req, gv, gr, "the cache server is starting and does not know its types yet")
				return
			}
			if p := r.lookupPublished(gr); p != nil {
				r.servePublished(w, req, p, info, delegate)
				return
			}
			if sibling := r.identityHashSibling(gr); sibling != nil {
				r.serveUnknownIdentityHash(w, req, sibling, info, gr)
				return
			}
			// Upstream's handler sees a CRD Established on its own
			// informer's event, this registry on another: in between, the
			// delegate would serve the type itself, storing outside every
			// partition what the data plane would never show.
			if r.establishedCRD(gr) {
				unavailable(w, req, gv, gr, "the type's CRD is established and the cache is about to serve it")
				return
			}
			delegate.ServeHTTP(w, req)
			return
		}
		scope, ok := s.scopes[info.APIVersion]
		if !ok {
			// Not a served version: apiextensions answers 404 for it.
			delegate.ServeHTTP(w, req)
			return
		}
		if err := pathNotServed(info, gr, s.resource.Namespaced); err != nil {
			responsewriters.ErrorNegotiated(err, scope.Serializer, gv, w, req)
			return
		}
		if info.Subresource != "" {
			responsewriters.ErrorNegotiated(apierrors.NewNotFound(schema.GroupResource{Group: gr.Group, Resource: gr.Resource + "/" + info.Subresource}, info.Name), scope.Serializer, gv, w, req)
			return
		}
		if err := s.store.ReadinessCheck(); err != nil {
			unavailable(w, req, gv, gr, fmt.Sprintf("the storage of %s is initializing: %v", gr, err))
			return
		}
		if (info.Verb == "create" || info.Verb == "update") && cborBody(req) {
			responsewriters.ErrorNegotiated(negotiation.NewUnsupportedMediaTypeError([]string{runtime.ContentTypeJSON, runtime.ContentTypeYAML}), scope.Serializer, gv, w, req)
			return
		}
		r.serve(s, scope, info).ServeHTTP(w, req)
	})
}

// cborBody reports whether req's body is CBOR. A served type may answer in
// CBOR, but it takes its bodies as JSON or YAML only, the form it stores and
// checks (filters.WithRequestGuard): a CBOR body gets 415, on which
// client-go sends JSON instead. (Patches are refused by their own list of
// types.)
func cborBody(req *http.Request) bool {
	mediaType, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return err == nil && mediaType == runtime.ContentTypeCBOR
}

func (r *Registry) serve(s *served, scope *handlers.RequestScope, info *request.RequestInfo) http.Handler {
	store, cfg := s.store, r.cfg
	switch info.Verb {
	case "get":
		return handlers.GetResource(store, scope)
	case "list":
		return r.listHandler(store, scope)
	case "watch":
		return handlers.ListResource(store, store, scope, true, cfg.MinRequestTimeout)
	case "create":
		return r.copyScopes.withoutDiscardedFieldManager(scope, func(scope *handlers.RequestScope) http.Handler {
			return handlers.CreateResource(copyWrites{store}, scope, cfg.Admission)
		})
	case "update":
		return r.copyScopes.withoutDiscardedFieldManager(scope, func(scope *handlers.RequestScope) http.Handler {
			return handlers.UpdateResource(copyWrites{store}, scope, cfg.Admission)
		})
	case "patch":
		return r.copyScopes.withoutDiscardedFieldManager(scope, func(scope *handlers.RequestScope) http.Handler {
			return handlers.PatchResource(copyWrites{store}, scope, cfg.Admission, patchTypes)
		})
	case "delete":
		return handlers.DeleteResource(store, true, scope, cfg.Admission)
	case "deletecollection":
		return handlers.DeleteCollection(store, true, scope, cfg.Admission)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(s.resource.GroupResource(), info.Verb), scope.Serializer, scope.Kind.GroupVersion(), w, req)
	})
}

// unavailable answers 503 with Retry-After and a Status body: a client must
// never take a type that is still warming up for a type that does not exist
// (client-go reads a 404 as "the object is absent"), and client-go retries
// a 503 with Retry-After by itself.
func unavailable(w http.ResponseWriter, req *http.Request, gv schema.GroupVersion, gr schema.GroupResource, msg string) {
	err := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: msg,
		Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, RetryAfterSeconds: retryAfterSeconds},
	}}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	responsewriters.ErrorNegotiated(err, statusCodecs, gv, w, req)
}
