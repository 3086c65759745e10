package opaque

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
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

// FuzzStoredRoundTrip: what a request decodes to is stored, read back as
// the watch cache reads it (a partial object whose hot metadata is parsed
// from the stored bytes) and stored again: the object is the same, every
// metadata field the hot path answers agrees with a full parse, and the
// second encoding is byte for byte the first.
func FuzzStoredRoundTrip(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"g/v1","kind":"W","metadata":{"name":"a","namespace":"n","uid":"u","generation":3,"labels":{"x":"y"},"annotations":{"kcp.io/cluster":"root","cache.kcp.io/shard":"amber"},"creationTimestamp":"2026-01-02T03:04:05Z"},"spec":{"a":[1,2]}}`,
		`{"apiVersion":"g/v1","kind":"W","metadata":{"name":"a","resourceVersion":"12"}}`,
		`{"apiVersion":"g/v1","kind":"W","metadata":{"deletionTimestamp":"2026-01-02T03:04:05Z","finalizers":["f"]}}`,
		`{"apiVersion":"g/v1","kind":"W"}`,
		`{"kind":"W","apiVersion":"g/v1","status":null,"metadata":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sent := &Object{}
		if err := decodeRequest(data, sent); err != nil {
			return
		}
		var first bytes.Buffer
		if err := (Codec{MaxObjectBytes: 1 << 20}).Encode(sent, &first); err != nil {
			return // too large, or metadata that does not encode
		}
		got, _, err := (Codec{}).Decode(first.Bytes(), nil, nil)
		if err != nil {
			t.Fatalf("%s stored as %s, which does not decode: %v", data, first.Bytes(), err)
		}
		stored := got.(*Object)
		full := &Object{}
		if err := decodeRequest(first.Bytes(), full); err != nil {
			t.Fatalf("stored bytes %s are not a valid request body: %v", first.Bytes(), err)
		}
		for _, c := range []struct {
			field     string
			hot, full any
		}{
			{"name", stored.GetName(), full.GetName()},
			{"namespace", stored.GetNamespace(), full.GetNamespace()},
			{"uid", stored.GetUID(), full.GetUID()},
			{"resourceVersion", stored.GetResourceVersion(), full.GetResourceVersion()},
			{"generation", stored.GetGeneration(), full.GetGeneration()},
			{"creationTimestamp", stored.GetCreationTimestamp().UTC().String(), full.GetCreationTimestamp().UTC().String()},
			{"deletionTimestamp", fmt.Sprint(stored.GetDeletionTimestamp()), fmt.Sprint(full.GetDeletionTimestamp())},
			{"labels", fmt.Sprint(stored.GetLabels()), fmt.Sprint(full.GetLabels())},
			{"annotations", fmt.Sprint(stored.GetAnnotations()), fmt.Sprint(full.GetAnnotations())},
		} {
			if c.hot != c.full {
				t.Fatalf("stored %s: %s reads %v from storage, %v from a full parse", first.Bytes(), c.field, c.hot, c.full)
			}
		}
		shard, cluster := stored.PartitionAnnotations()
		if a := full.GetAnnotations(); shard != a[kcpcache.AnnotationShard] || cluster != a[kcpcache.AnnotationCluster] {
			t.Fatalf("stored %s: partition %q/%q, annotations say %q/%q", first.Bytes(), shard, cluster, a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster])
		}
		var second bytes.Buffer
		if err := (Codec{MaxObjectBytes: 1 << 20}).Encode(stored, &second); err != nil {
			t.Fatalf("stored %s decodes but does not encode again: %v", first.Bytes(), err)
		}
		if !bytes.Equal(first.Bytes(), second.Bytes()) {
			t.Fatalf("%s stored as %s, then as %s", data, first.Bytes(), second.Bytes())
		}
	})
}

// FuzzCheckJSONPatchKeys: a JSON patch the key-case guard lets through,
// applied to an object whose every name is exact, builds an object that
// reads the same to a case-insensitive decoder as to the server. Patches
// that copy or move are left out: what they build is checked when the
// patched object is decoded (decodeRequest), not here.
func FuzzCheckJSONPatchKeys(f *testing.F) {
	for _, s := range []string{
		`[{"op":"replace","path":"/metadata/name","value":"x"}]`,
		`[{"op":"add","path":"/metadata/Name","value":"x"}]`,
		`[{"op":"add","path":"/Kind","value":"x"}]`,
		`[{"op":"add","path":"/metadata","value":{"name":"a","NAME":"b"}}]`,
		`[{"op":"add","path":"","value":{"kind":"a","KIND":"b"}}]`,
		`[{"op":"add","path":"/metadata~1x","value":1}]`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	const base = `{"apiVersion":"g/v1","kind":"W","metadata":{"name":"a","uid":"u"}}`
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || CheckJSONPatchKeys(data) != nil {
			return
		}
		var ops []struct {
			Op    string          `json:"op"`
			Value json.RawMessage `json:"value"`
		}
		if json.Unmarshal(data, &ops) != nil {
			return
		}
		for _, op := range ops {
			if op.Op == "copy" || op.Op == "move" {
				return
			}
			// The request guard refuses these before this check
			// (json-patch.v4 panics on a replace of the whole object
			// without a value).
			if (op.Op == "add" || op.Op == "replace" || op.Op == "test") && op.Value == nil {
				return
			}
		}
		patch, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return
		}
		patched, err := patch.Apply([]byte(base))
		if err != nil {
			return
		}
		if err := CheckKeys(patched); err != nil {
			t.Fatalf("patch %s passed, but builds %s, refused: %v", data, patched, err)
		}
	})
}
