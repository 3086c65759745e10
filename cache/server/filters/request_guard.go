package filters

import (
	"bytes"
	"context"
	"encoding/json"
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
	sigsyaml "sigs.k8s.io/yaml"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
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
		if err := checkResourceVersionParameter(req, info); err != nil {
			writeStatus(w, req, cfg.Codecs, err)
			return
		}

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

// readVerbs take a resourceVersion parameter: where to read from.
var readVerbs = sets.New("get", "list", "watch", "deletecollection")

// checkResourceVersionParameter refuses a resourceVersion parameter that is
// not one: resource versions are etcd revisions, unsigned integers. Upstream
// answers some of these (a watch, a get) with an internal error (500);
// the mistake is the client's.
func checkResourceVersionParameter(req *http.Request, info *request.RequestInfo) error {
	if !readVerbs.Has(info.Verb) {
		return nil
	}
	rv := req.URL.Query().Get("resourceVersion")
	if rv == "" {
		return nil
	}
	if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("resourceVersion=%q is not a resource version (an unsigned integer from an earlier answer)", rv))
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

var (
	// jsonBodyTypes are bodies that hold the object (a merge patch: part
	// of it) as JSON.
	jsonBodyTypes = sets.New("application/json", "application/merge-patch+json", "application/strategic-merge-patch+json")
	// yamlBodyTypes hold it as YAML: server-side apply, kubectl's YAML.
	yamlBodyTypes = sets.New("application/yaml", "application/apply-patch+yaml")
)

const jsonPatchType = "application/json-patch+json"

// withOriginMeta reads a write's body (bounded), refuses member names that
// a case-insensitive decoder would read as apiVersion, kind, metadata or a
// metadata field (opaque.CheckKeys), records the origin's uid,
// creationTimestamp, generation and managedFields of a JSON body in the
// context, and restores the body for the real handler. Other encodings pass
// through untouched (protobuf is refused with 415 by the handler).
func withOriginMeta(req *http.Request, info *request.RequestInfo, limit int64) (*http.Request, error) {
	contentType := req.Header.Get("Content-Type")
	if contentType == "" {
		// Upstream's handler decodes a body without a Content-Type as
		// its serializer's first media type, JSON
		// (negotiation.NegotiateInputSerializerForMediaType): it is
		// checked as JSON here too, or a copy created that way would
		// skip the checks and lose its origin's uid and creation time.
		contentType = runtime.ContentTypeJSON
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil || req.Body == nil || !(jsonBodyTypes.Has(mediaType) || yamlBodyTypes.Has(mediaType) || mediaType == jsonPatchType) {
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
	restored := func(r *http.Request) *http.Request {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		return r
	}
	switch {
	case mediaType == jsonPatchType:
		if err := checkJSONPatchValues(body); err != nil {
			return req, apierrors.NewBadRequest(err.Error())
		}
		if err := opaque.CheckJSONPatchKeys(body); err != nil {
			return req, apierrors.NewBadRequest(err.Error())
		}
		return restored(req), nil
	case yamlBodyTypes.Has(mediaType):
		j, err := sigsyaml.YAMLToJSON(body)
		if err != nil {
			return req, apierrors.NewBadRequest(fmt.Sprintf("the request body is not valid YAML: %v", err))
		}
		if err := opaque.CheckKeys(j); err != nil {
			return req, apierrors.NewBadRequest(err.Error())
		}
		return restored(req), nil
	}
	// Decoded as upstream's serializer decodes the object: field names are
	// case-sensitive, so what is read here is what the handler sees.
	var parsed originMetaBody
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &parsed); err != nil {
		return req, apierrors.NewBadRequest(fmt.Sprintf("the request body is not a valid JSON object: %v", err))
	}
	if err := opaque.CheckKeys(body); err != nil {
		return req, apierrors.NewBadRequest(err.Error())
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
	return restored(req.WithContext(partition.WithOriginMeta(req.Context(), origin))), nil
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

// jsonPatchOpsWithValue are the JSON patch operations that RFC 6902 (4.1,
// 4.3, 4.6) gives a "value" member.
var jsonPatchOpsWithValue = sets.New("add", "replace", "test")

// checkJSONPatchValues refuses a JSON patch operation that needs a value
// and has none. Upstream's patch handler passes such an operation to
// gopkg.in/evanphx/json-patch.v4, whose replace of the whole document
// dereferences the missing value (a panic, answered 500), whose add
// answers 422 and whose test passes. A body that is not a list of
// operations is left to the patch handler, which says why.
func checkJSONPatchValues(body []byte) error {
	var ops []map[string]json.RawMessage
	if json.Unmarshal(body, &ops) != nil {
		return nil
	}
	for n, op := range ops {
		var name string
		if json.Unmarshal(op["op"], &name) != nil || !jsonPatchOpsWithValue.Has(name) {
			continue
		}
		if _, ok := op["value"]; !ok {
			return fmt.Errorf("JSON patch operation %d (%s) has no value: RFC 6902 requires one for add, replace and test", n, name)
		}
	}
	return nil
}
