package opaque

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzCheckKeys checks the key-case guard against encoding/json, the
// decoder a client of the cache may well use: a body CheckKeys lets through
// decodes, through Go's case-insensitive struct decoding, to exactly the
// apiVersion, kind and metadata a case-sensitive reader (this server, and
// upstream's serializer) sees.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"v1","kind":"K","metadata":{"name":"a"}}`,
		`{"apiVersion":"v1","kind":"K","metadata":{"name":"a"},"Metadata":{"name":"b"}}`,
		`{"kind":"K","KIND":"L"}`,
		`{"\u006bind":"K"}`,
		"{\"\u212aind\":\"K\"}",
		`{"metadata":{"annotations":{"a":"b"},"Annotations":{"a":"c"}}}`,
		`{"metadata":null}`,
		`{"metadata":[1]}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var exact map[string]json.RawMessage
		if json.Unmarshal(data, &exact) != nil {
			return // CheckKeys takes valid JSON objects only
		}
		if CheckKeys(data) != nil {
			return
		}
		var folded struct {
			APIVersion json.RawMessage `json:"apiVersion"`
			Kind       json.RawMessage `json:"kind"`
			Metadata   json.RawMessage `json:"metadata"`
		}
		if json.Unmarshal(data, &folded) != nil {
			return
		}
		for name, got := range map[string]json.RawMessage{"apiVersion": folded.APIVersion, "kind": folded.Kind, "metadata": folded.Metadata} {
			if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(exact[name])) {
				t.Fatalf("%s: a case-insensitive decoder reads %s, the server reads %s (body %s)", name, got, exact[name], data)
			}
		}
		if len(exact["metadata"]) == 0 || exact["metadata"][0] != '{' {
			return
		}
		var metaExact map[string]json.RawMessage
		if json.Unmarshal(exact["metadata"], &metaExact) != nil {
			return
		}
		var metaFolded struct {
			Name        json.RawMessage `json:"name"`
			Annotations json.RawMessage `json:"annotations"`
			Labels      json.RawMessage `json:"labels"`
			UID         json.RawMessage `json:"uid"`
		}
		if json.Unmarshal(exact["metadata"], &metaFolded) != nil {
			return
		}
		for name, got := range map[string]json.RawMessage{"name": metaFolded.Name, "annotations": metaFolded.Annotations, "labels": metaFolded.Labels, "uid": metaFolded.UID} {
			if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(metaExact[name])) {
				t.Fatalf("metadata.%s: a case-insensitive decoder reads %s, the server reads %s (body %s)", name, got, metaExact[name], data)
			}
		}
	})
}

// FuzzDecodeRequest: an untrusted request body decodes or is refused,
// never panics, and what decodes is encoded to JSON that decodes again to
// the same object.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"apis.kcp.io/v1alpha2","kind":"APIExport","metadata":{"name":"a","annotations":{"kcp.io/cluster":"root"}},"spec":{"x":[1,{"y":"}"}]}}`,
		`{"spec":{},"metadata":{"name":"a"},"kind":"K","apiVersion":"v1"}`,
		`{"apiVersion":"v1","kind":"K","metadata":null}`,
		`{"apiVersion":"v1","kind":"K","metadata":{"managedFields":[{"manager":"m","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{}}]}}`,
		`{"apiVersion":1}`,
		`[]`,
		`{"a":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o := &Object{}
		if err := decodeRequest(data, o); err != nil {
			return
		}
		encoded, err := appendObject(nil, o, o.APIVersion, o.Kind)
		if err != nil {
			t.Fatalf("%s decoded but does not encode: %v", data, err)
		}
		if !json.Valid(encoded) {
			t.Fatalf("%s encodes to invalid JSON %s", data, encoded)
		}
		back := &Object{}
		if err := decodeRequest(encoded, back); err != nil {
			t.Fatalf("%s encodes to %s, which does not decode: %v", data, encoded, err)
		}
		if !semanticallyEqual(*o, *back) {
			t.Fatalf("%s: decoded, encoded (%s) and decoded again differs", data, encoded)
		}
	})
}
