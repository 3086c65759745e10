package dataplane

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// WithRequestMetrics records the requests for the registry's types in
// upstream's request metrics (apiserver_request_total,
// apiserver_request_duration_seconds, apiserver_response_sizes, ...), as
// upstream's installer and apiextensions' handler record theirs: the data
// plane answers them itself, so nothing upstream would count them otherwise.
// It belongs outside every filter that answers for the data plane (the
// request guard), so that their refusals are counted too, and inside the
// default chain, which provides the request info and the received timestamp.
//
// Labels are upstream's: verb, group, version, resource, subresource, scope,
// component and code. The partition never is (shards times clusters would
// multiply every series), nor an identity hash: "widgets:<hash>" is counted
// as "widgets", because every APIExport adds an identity. Requests for
// names and versions the registry does not serve pass unrecorded: their
// labels would be whatever a client sends (apiextensions records the CRD
// API itself, and upstream records no 404 of an unknown resource either).
func (r *Registry) WithRequestMetrics(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if !ok {
			handler.ServeHTTP(w, req)
			return
		}
		resource, ok := r.metricsResource(info)
		if !ok {
			handler.ServeHTTP(w, req)
			return
		}
		// Upstream's wrapper: WATCH is a verb of its own, so a watch's open
		// time never mixes with the latencies of other verbs, and
		// WithLatencyTrackers leaves watches out of the SLI histograms.
		metrics.InstrumentHandlerFunc(strings.ToUpper(info.Verb), info.APIGroup, info.APIVersion, resource, info.Subresource,
			metrics.CleanScope(info), metrics.APIServerComponent, false, "", handler.ServeHTTP)(w, req)
	})
}

// metricsResource returns the resource label of a request the registry
// serves: a declared type, a published resource, or an identity of a known
// resource, each in a version it serves. The data plane serves no
// subresource, so requests for one are not recorded.
func (r *Registry) metricsResource(info *request.RequestInfo) (string, bool) {
	if !info.IsResourceRequest || info.APIGroup == apiextensionsGroup || info.Subresource != "" {
		return "", false
	}
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	base, _, _ := strings.Cut(gr.Resource, ":")
	if s, _ := r.lookup(gr); s != nil {
		_, ok := s.scopes[info.APIVersion]
		return base, ok
	}
	if p := r.lookupPublished(gr); p != nil {
		_, ok := p.scopes[info.APIVersion]
		return base, ok
	}
	if s := r.identityHashSibling(gr); s != nil {
		_, ok := s.scopes[info.APIVersion]
		return base, ok
	}
	return "", false
}
