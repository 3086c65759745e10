package filters

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// writeStatus answers with err as a Kubernetes Status in the encoding the
// client negotiated.
func writeStatus(w http.ResponseWriter, req *http.Request, codecs runtime.NegotiatedSerializer, err error) {
	responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{}, w, req)
}
