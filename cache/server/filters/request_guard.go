package filters

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/request"
	kjson "sigs.k8s.io/json"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// GuardConfig is what WithRequestGuard needs to know about the server.
type GuardConfig struct {
	// Codecs encodes error Status responses.
	Codecs runtime.NegotiatedSerializer
	// MaxRequestBodyBytes bounds how much of a write's body is read to find
	// the origin metadata; a larger body is refused with 413.
	MaxRequestBodyBytes int64
	// CheckCRDDeletion returns the error a deletion (verb delete or
	// deletecollection) of the CRD name is refused with, or nil (see
	// removal.CRDDeletion); nil allows every deletion.
	CheckCRDDeletion func(ctx context.Context, verb, name string) error
}

// WithRequestGuard refuses requests that must never reach storage and carries
// a pushed copy's origin metadata into the request context. It expects the
// request info (upstream's WithRequestInfo) and the scope (WithPartition) in
// the context, so install it inside the default handler chain.
func WithRequestGuard(handler http.Handler, cfg GuardConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		info, ok := request.RequestInfoFrom(ctx)
		scope, scoped := kcpcache.ScopeFrom(ctx)
		if !ok || !info.IsResourceRequest || !scoped {
			handler.ServeHTTP(w, req)
			return
		}
		gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}

		if scope.IsWildcard() {
			if err := checkWildcardRequest(req, info, scope, gr); err != nil {
				writeStatus(w, req, cfg.Codecs, err)
				return
			}
			handler.ServeHTTP(w, req)
			return
		}

		if gr == authorization.CRDResource && (info.Verb == "delete" || info.Verb == "deletecollection") && cfg.CheckCRDDeletion != nil {
			if err := cfg.CheckCRDDeletion(ctx, info.Verb, info.Name); err != nil {
				writeStatus(w, req, cfg.Codecs, err)
				return
			}
		}

		if !scope.IsSystem() && (info.Verb == "create" || info.Verb == "update" || info.Verb == "patch") && info.Subresource == "" {
			var err error
			if req, err = withOriginMeta(req, info, cfg.MaxRequestBodyBytes); err != nil {
				writeStatus(w, req, cfg.Codecs, err)
				return
			}
		}
		handler.ServeHTTP(w, req)
	})
}

// checkWildcardRequest allows only lists and watches through a wildcard.
func checkWildcardRequest(req *http.Request, info *request.RequestInfo, scope kcpcache.Scope, gr schema.GroupResource) error {
	switch {
	case authorization.IsWrite(info.Verb):
		return apierrors.NewMethodNotSupported(gr, fmt.Sprintf("%s in the wildcard scope %s (writes need one shard and one cluster)", info.Verb, scope))
	case info.Verb == "get":
		return apierrors.NewBadRequest(fmt.Sprintf("cannot get %s %q in the wildcard scope %s: name one shard and one cluster, or list with fieldSelector=metadata.name=%s", gr, info.Name, scope, info.Name))
	case info.Verb == "watch":
		if v, err := strconv.ParseBool(req.URL.Query().Get("sendInitialEvents")); err == nil && v {
			// client-go buffers a watch-list's initial events by
			// namespace/name and would collapse same-named objects of
			// different partitions; on this error it falls back to LIST+WATCH.
			return apierrors.NewBadRequest(fmt.Sprintf("sendInitialEvents is not supported in the wildcard scope %s: list, then watch from the list's resourceVersion", scope))
		}
	}
	return nil
}

// originMetaBody is the part of a pushed copy that upstream would reset or
// rewrite.
type originMetaBody struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string      `json:"name"`
		UID               types.UID   `json:"uid"`
		CreationTimestamp metav1.Time `json:"creationTimestamp"`
		Generation        int64       `json:"generation"`
		// ManagedFields is nil when absent or null.
		ManagedFields *[]metav1.ManagedFieldsEntry `json:"managedFields"`
	} `json:"metadata"`
}

var jsonBodyTypes = sets.New("application/json", "application/merge-patch+json", "application/strategic-merge-patch+json")

// withOriginMeta reads a JSON write's body (bounded), records the origin's
// uid, creationTimestamp, generation and managedFields in the context, and
// restores the body for the real handler. Other encodings pass through
// untouched.
func withOriginMeta(req *http.Request, info *request.RequestInfo, limit int64) (*http.Request, error) {
	mediaType, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || !jsonBodyTypes.Has(mediaType) || req.Body == nil {
		return req, nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	_ = req.Body.Close()
	if err != nil {
		return req, apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
	}
	if int64(len(body)) > limit {
		return req, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", limit))
	}
	// Decoded as upstream's serializer decodes the object: field names are
	// case-sensitive, so what is read here is what the handler sees.
	var parsed originMetaBody
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &parsed); err != nil {
		return req, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid JSON object: %v", err))
	}
	m := parsed.Metadata
	origin := partition.OriginMeta{UID: m.UID, CreationTimestamp: m.CreationTimestamp, Generation: m.Generation}
	if m.ManagedFields != nil {
		entries, errs := sentManagedFields(*m.ManagedFields)
		if len(errs) > 0 {
			kind, name := parsed.Kind, m.Name
			if kind == "" { // a merge patch
				kind, name = info.Resource, info.Name
			}
			return req, apierrors.NewInvalid(schema.GroupKind{Group: info.APIGroup, Kind: kind}, name, errs)
		}
		origin.ManagedFields, origin.SentManagedFields = entries, true
	}
	r := req.WithContext(partition.WithOriginMeta(req.Context(), origin))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r, nil
}

// sentManagedFields checks managedFields a body carries before storage keeps
// them as sent: upstream's field manager would drop entries it cannot decode,
// and kept ones would break every later server-side apply of the object. An
// empty list, and upstream's reset form (one empty entry), ask for none.
func sentManagedFields(entries []metav1.ManagedFieldsEntry) ([]metav1.ManagedFieldsEntry, field.ErrorList) {
	if len(entries) == 0 || (len(entries) == 1 && reflect.DeepEqual(entries[0], metav1.ManagedFieldsEntry{})) {
		return nil, nil
	}
	path := field.NewPath("metadata", "managedFields")
	if errs := metav1validation.ValidateManagedFields(entries, path); len(errs) > 0 {
		return nil, errs
	}
	if err := managedfields.ValidateManagedFields(entries); err != nil {
		return nil, field.ErrorList{field.Invalid(path, field.OmitValueType{}, err.Error())}
	}
	return entries, nil
}
