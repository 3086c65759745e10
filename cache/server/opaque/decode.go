package opaque

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
func decodeStored(data []byte, o *Object) error {
	p, m, err := parse(data)
	if err != nil {
		return err
	}
	*o = Object{
		TypeMeta: metav1.TypeMeta{APIVersion: internString(p.apiVersion), Kind: internString(p.kind)},
		data:     concat(p.meta, p.body),
		metaEnd:  len(p.meta),
	}
	// Storage never holds a resourceVersion; bytes that do (written by
	// something else) are not reused as the metadata.
	if p.meta != nil && m.ResourceVersion == "" {
		o.hot = hotMeta{
			name:              m.Name,
			namespace:         m.Namespace,
			uid:               m.UID,
			generation:        m.Generation,
			creationTimestamp: m.CreationTimestamp,
			deletionTimestamp: m.DeletionTimestamp,
			labels:            m.Labels,
		}
		o.rawMetaValid = true
		o.shard = internString(m.Annotations[kcpcache.AnnotationShard])
		o.cluster = internString(m.Annotations[kcpcache.AnnotationCluster])
	} else {
		o.meta = &m
	}
	return nil
}

// concat returns meta followed by body as a string, in one allocation.
func concat(meta, body []byte) string {
	buf := make([]byte, len(meta)+len(body))
	n := copy(buf, meta)
	copy(buf[n:], body)
	// buf is never changed after this.
	return unsafe.String(unsafe.SliceData(buf), len(buf))
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
