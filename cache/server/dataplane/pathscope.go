package dataplane

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// acrossNamespacesVerbs are what a namespaced type serves without a
// namespace in the path: they span every namespace.
var acrossNamespacesVerbs = sets.New("list", "watch")

// pathNotServed returns the 404 of a request whose path does not exist for
// a type of that scope, or nil. Upstream serves a cluster-scoped type only
// outside namespaces and a namespaced type only inside one (but for lists
// and watches), so such paths are unknown there (apiextensions' handler
// passes them on to its 404). Served anyway, a cluster-scoped create under
// any namespace would be stored at the type's cluster-scoped key and every
// verb would work under every made-up namespace.
func pathNotServed(info *request.RequestInfo, gr schema.GroupResource, namespaced bool) error {
	var why string
	switch {
	case !namespaced && info.Namespace != "":
		why = fmt.Sprintf("%s is cluster-scoped and not served under namespaces/%s", gr, info.Namespace)
	case namespaced && info.Namespace == "" && !acrossNamespacesVerbs.Has(info.Verb):
		why = fmt.Sprintf("%s is namespaced: %s needs namespaces/{namespace} in the path", gr, info.Verb)
	default:
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource: " + why,
		Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: info.Name},
	}}
}
