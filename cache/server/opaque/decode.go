package opaque

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// decodeStored fills o from bytes read from storage, as a partial object:
// the watch cache holds it for as long as it is current, so it keeps the
// stored bytes and only the metadata fields read on every object.
//
// The bytes are not interned: interning (unique.Make) would let an object's
// delete event share them with the object, but costs about 210 bytes of
// bookkeeping for every cached object (measured with examples/bench), while
// the delete event lives only in the watch cache's history.
//
// It decodes only the fields it keeps (storedMeta), not the rest of the
// metadata: a watch cache's fill decodes every object of its type, and a
// kcp object's managedFields, decoded into entries and dropped, were about
// half of that. Stored metadata is written by Codec from a complete
// ObjectMeta, so the rest parses as well when it is asked for (full); bytes
// that are not valid JSON still fail here.
func decodeStored(data []byte, o *Object) error {
	p, err := split(data)
	if err != nil {
		return err
	}
	var m storedMeta
	if p.meta != nil && !fastMeta(p.meta, &m) {
		// Not the shape Codec writes: the general decoder says what it is.
		m = storedMeta{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(p.meta, &m); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
	}
	*o = Object{
		TypeMeta: metav1.TypeMeta{APIVersion: internString(p.apiVersion), Kind: internString(p.kind)},
		data:     concat(p.meta, p.body),
		metaEnd:  len(p.meta),
	}
	// Storage never holds a resourceVersion; bytes that do (written by
	// something else) are not reused as the metadata.
	if p.meta != nil && m.ResourceVersion == "" {
		meta := o.data[:o.metaEnd]
		o.hot = hotMeta{
			name:              shareString(meta, m.Name),
			namespace:         shareString(meta, m.Namespace),
			uid:               types.UID(shareString(meta, string(m.UID))),
			generation:        m.Generation,
			creationTimestamp: m.CreationTimestamp,
			deletionTimestamp: m.DeletionTimestamp,
			labels:            m.Labels,
		}
		o.rawMetaValid = true
		o.shard = internString(m.Annotations[kcpcache.AnnotationShard])
		o.cluster = internString(m.Annotations[kcpcache.AnnotationCluster])
		return nil
	}
	full := &metav1.ObjectMeta{}
	if p.meta != nil {
		if err := unmarshalMeta(p.meta, full); err != nil {
			return err
		}
	}
	o.meta = full
	return nil
}

// storedMeta is what decodeStored reads of stored metadata: the fields of
// hotMeta, the partition annotations and resourceVersion, decoded, and
// every other field of ObjectMeta under its name and type, so that
// metadata decodes here exactly when it decodes as an ObjectMeta. The
// managedFields are checked without being kept (checkedManagedFields).
type storedMeta struct {
	Name                       string                      `json:"name,omitempty"`
	GenerateName               string                      `json:"generateName,omitempty"`
	Namespace                  string                      `json:"namespace,omitempty"`
	SelfLink                   string                      `json:"selfLink,omitempty"`
	UID                        types.UID                   `json:"uid,omitempty"`
	ResourceVersion            string                      `json:"resourceVersion,omitempty"`
	Generation                 int64                       `json:"generation,omitempty"`
	CreationTimestamp          metav1.Time                 `json:"creationTimestamp,omitempty"`
	DeletionTimestamp          *metav1.Time                `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64                      `json:"deletionGracePeriodSeconds,omitempty"`
	Labels                     map[string]string           `json:"labels,omitempty"`
	Annotations                map[string]string           `json:"annotations,omitempty"`
	OwnerReferences            []metav1.OwnerReference     `json:"ownerReferences,omitempty"`
	Finalizers                 []string                    `json:"finalizers,omitempty"`
	ManagedFields              []checkedManagedFieldsEntry `json:"managedFields,omitempty"`
}

// checkedManagedFieldsEntry accepts what metav1.ManagedFieldsEntry accepts
// and keeps nothing: it has no size, so neither has a slice of them.
type checkedManagedFieldsEntry struct {
	Manager     checkedString `json:"manager,omitempty"`
	Operation   checkedString `json:"operation,omitempty"`
	APIVersion  checkedString `json:"apiVersion,omitempty"`
	Time        checkedTime   `json:"time,omitempty"`
	FieldsType  checkedString `json:"fieldsType,omitempty"`
	FieldsV1    checkedAny    `json:"fieldsV1,omitempty"`
	Subresource checkedString `json:"subresource,omitempty"`
}

// checkedString accepts what a string field accepts: a string or null.
type checkedString struct{}

func (*checkedString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && (b[0] == '"' || string(b) == "null") {
		return nil
	}
	return fmt.Errorf("cannot unmarshal %s into a string", b)
}

// checkedTime accepts what a metav1.Time field accepts.
type checkedTime struct{}

func (*checkedTime) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b, '\\') < 0 {
		// A string without escapes is its text; metav1.Time decodes it
		// with encoding/json first, the larger part of its cost.
		_, err := time.Parse(time.RFC3339, string(b[1:len(b)-1]))
		return err
	}
	var t metav1.Time
	return t.UnmarshalJSON(b)
}

// checkedAny accepts any value, as metav1.FieldsV1 does.
type checkedAny struct{}

func (*checkedAny) UnmarshalJSON([]byte) error { return nil }

// concat returns meta followed by body as a string, in one allocation.
func concat(meta, body []byte) string {
	buf := make([]byte, len(meta)+len(body))
	n := copy(buf, meta)
	copy(buf[n:], body)
	// buf is never changed after this.
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

// shareString returns s as a substring of data when data holds its bytes,
// so that a cached object's name, namespace and uid, which its stored
// metadata holds anyway (as they are, unless escaped), cost no allocation
// of their own: about 64 bytes per cached object for a kcp object's name
// and uid. Any occurrence will do, as equal bytes are an equal string. A
// name kept beyond its object keeps the object's bytes with it; the watch
// cache keeps names only with their objects.
func shareString(data, s string) string {
	if s == "" {
		return ""
	}
	if i := strings.Index(data, s); i >= 0 {
		return data[i : i+len(s)]
	}
	return s
}

// internString shares the bytes of the many equal apiVersions, kinds, shard
// and cluster names; there are few distinct ones.
func internString(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// decodeRequest fills o from an untrusted request body: it validates and
// compacts the JSON, and parses the metadata in full. The metadata is
// encoded again before it is stored, so its bytes are not kept as such.
func decodeRequest(data []byte, o *Object) error {
	// JSON is UTF-8 (RFC 8259). Invalid bytes would be kept as they are in
	// the names and strings this package reads itself, where upstream's
	// decoder (and every client's) reads U+FFFD: the same body would mean
	// two things. Found by FuzzDecodeRequest.
	if !utf8.Valid(data) {
		return errors.New("the request body is not valid UTF-8")
	}
	var compact bytes.Buffer
	compact.Grow(len(data))
	if err := json.Compact(&compact, data); err != nil {
		return fmt.Errorf("the request body is not valid JSON: %w", err)
	}
	// The request guard refuses such bodies as they arrive; this also
	// covers what a patch builds from the stored object (see CheckKeys).
	if err := CheckKeys(compact.Bytes()); err != nil {
		return err
	}
	p, m, err := parse(compact.Bytes())
	if err != nil {
		return err
	}
	*o = Object{
		TypeMeta: metav1.TypeMeta{APIVersion: p.apiVersion, Kind: p.kind},
		meta:     &m,
		data:     string(p.body),
	}
	return nil
}

// parse splits data and decodes its metadata in full.
func parse(data []byte) (parts, metav1.ObjectMeta, error) {
	var m metav1.ObjectMeta
	p, err := split(data)
	if err == nil && p.meta != nil {
		err = unmarshalMeta(p.meta, &m)
	}
	return p, m, err
}

// unmarshalMeta decodes metadata as upstream's JSON serializer does: field
// names are case-sensitive and unknown fields are dropped.
func unmarshalMeta(data []byte, m *metav1.ObjectMeta) error {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, m); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	return nil
}
