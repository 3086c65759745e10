package opaque

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// decodeStored fills o from bytes read from storage. It keeps the metadata
// bytes (storage never holds a resourceVersion) and the body in one
// allocation of their exact size, so that a cached object costs little more
// than its stored size, and does not alias data.
func decodeStored(data []byte, o *Object) error {
	p, err := split(data)
	if err != nil {
		return err
	}
	var m metav1.ObjectMeta
	if p.meta != nil {
		if err := unmarshalMeta(p.meta, &m); err != nil {
			return err
		}
	}
	buf := make([]byte, len(p.meta)+len(p.body))
	n := copy(buf, p.meta)
	copy(buf[n:], p.body)
	*o = Object{
		TypeMeta:   metav1.TypeMeta{APIVersion: p.apiVersion, Kind: p.kind},
		ObjectMeta: m,
		body:       buf[n:],
	}
	if p.meta != nil && m.ResourceVersion == "" {
		o.rawMeta = buf[:n:n]
	}
	return nil
}

// decodeRequest fills o from an untrusted request body: it validates and
// compacts the JSON, and parses the metadata. The body is re-encoded before
// it is stored, so no metadata bytes are kept.
func decodeRequest(data []byte, o *Object) error {
	var compact bytes.Buffer
	compact.Grow(len(data))
	if err := json.Compact(&compact, data); err != nil {
		return fmt.Errorf("the request body is not valid JSON: %w", err)
	}
	p, err := split(compact.Bytes())
	if err != nil {
		return err
	}
	var m metav1.ObjectMeta
	if p.meta != nil {
		if err := unmarshalMeta(p.meta, &m); err != nil {
			return err
		}
	}
	*o = Object{
		TypeMeta:   metav1.TypeMeta{APIVersion: p.apiVersion, Kind: p.kind},
		ObjectMeta: m,
		body:       p.body,
	}
	return nil
}

// unmarshalMeta decodes metadata as upstream's JSON serializer does: field
// names are case-sensitive and unknown fields are dropped.
func unmarshalMeta(data []byte, m *metav1.ObjectMeta) error {
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, m); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	return nil
}
