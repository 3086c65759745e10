package dataplane

import (
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// nowhere is a partition no request can name (shard names are lowercase),
// so it never holds an object: reads of an unknown identity hash are served from
// a sibling type's storage scoped to it, which answers an empty list with a
// real resourceVersion, and watches that stay open and see nothing.
var nowhere = kcpcache.Scope{Shard: "-", Cluster: "-"}

// identityHashSibling returns a served type of gr's group that has gr's resource
// name, plain or with another identity hash, when gr is
// "<resource>:<identity hash>" (an APIExport's status.identityHash).
func (r *Registry) identityHashSibling(gr schema.GroupResource) *served {
	base, _, ok := strings.Cut(gr.Resource, ":")
	if !ok || base == "" {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s := r.served[schema.GroupResource{Group: gr.Group, Resource: base}]; s != nil {
		return s
	}
	var found *served
	for other, s := range r.served {
		if other.Group != gr.Group || !strings.HasPrefix(other.Resource, base+":") {
			continue
		}
		// The first in name order, so answers do not change between requests.
		if found == nil || other.Resource < found.resource.Resource {
			found = s
		}
	}
	return found
}

// serveUnknownIdentityHash answers a request for an identity hash of a known resource
// that no cached APIExport or CachedResource declares, as kcp's cache does:
// reads find nothing, and writes are refused until a declaration arrives.
func (r *Registry) serveUnknownIdentityHash(w http.ResponseWriter, req *http.Request, sibling *served, info *request.RequestInfo, gr schema.GroupResource) {
	scope, ok := sibling.scopes[info.APIVersion]
	gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
	if !ok {
		responsewriters.ErrorNegotiated(apierrors.NewNotFound(gr, info.Name), statusCodecs, gv, w, req)
		return
	}
	if err := pathNotServed(info, gr, sibling.resource.Namespaced); err != nil {
		responsewriters.ErrorNegotiated(err, scope.Serializer, gv, w, req)
		return
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		base, identityHash, _ := strings.Cut(gr.Resource, ":")
		err := &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure,
			Code:   http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("%s: no cached APIExport or CachedResource declares identity hash %q of %s, so nothing can be written under it",
				gr, identityHash, schema.GroupResource{Group: gr.Group, Resource: base}),
			Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: info.Name},
		}}
		responsewriters.ErrorNegotiated(err, scope.Serializer, gv, w, req)
		return
	}
	if err := sibling.store.ReadinessCheck(); err != nil {
		unavailable(w, req, gv, gr, fmt.Sprintf("the storage of %s is initializing: %v", gr, err))
		return
	}
	req = req.WithContext(kcpcache.WithScope(req.Context(), nowhere))
	r.serve(sibling, scope, info).ServeHTTP(w, req)
}
