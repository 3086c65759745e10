package opaque

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// kcpMeta is the metadata of a kcp object as a shard writes it to the
// cache: partition annotations and two managedFields entries.
const kcpMeta = `{"name":"export-1","uid":"6f2c","generation":2,"creationTimestamp":"2026-01-02T03:04:05Z",` +
	`"labels":{"app":"x"},"annotations":{"kcp.io/cluster":"root:org","kcp.io/shard":"amber","other":"v"},` +
	`"finalizers":["f"],"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"o","uid":"u"}],` +
	`"managedFields":[{"manager":"kcp","operation":"Update","apiVersion":"apis.kcp.io/v1alpha1","time":"2026-01-02T03:04:05Z",` +
	`"fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:description":{},` +
	`"f:latestResourceSchemas":{"v:\"v1.widgets.example.io\"":{}},"f:permissionClaims":{".":{},"k:{\"group\":\"\",\"resource\":\"secrets\"}":{".":{},"f:group":{}}}}}},` +
	`{"manager":"user","operation":"Apply","apiVersion":"apis.kcp.io/v1alpha1","time":"2026-01-02T03:04:06Z",` +
	`"fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}}},"subresource":"status"}]}`

// Stored metadata decodes exactly when it decodes as an ObjectMeta, though
// only some of its fields are kept.
func TestDecodeStoredAcceptsWhatObjectMetaAccepts(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(kcpMeta, old) {
			t.Fatalf("%q is not in the metadata", old)
		}
		return strings.Replace(kcpMeta, old, new, 1)
	}
	for _, meta := range []string{
		kcpMeta,
		`{}`,
		`{"managedFields":null}`,
		`{"managedFields":[null]}`,
		`{"managedFields":[{}]}`,
		`{"managedFields":[{"time":null,"manager":null,"fieldsV1":null}]}`,
		`{"managedFields":[{"time":"2026-01-02T03:04:05\u002B01:00"}]}`,
		`{"managedFields":[{"unknown":[1,2,{"a":3}]}]}`,
		`{"unknown":{"managedFields":3}}`,
		`{"Name":"case","managedfields":3}`,
		replace(`"manager":"kcp"`, `"manager":3`),
		replace(`"operation":"Update"`, `"operation":true`),
		replace(`"apiVersion":"apis.kcp.io/v1alpha1"`, `"apiVersion":{}`),
		replace(`"fieldsType":"FieldsV1"`, `"fieldsType":[]`),
		replace(`"subresource":"status"`, `"subresource":1`),
		replace(`"time":"2026-01-02T03:04:05Z"`, `"time":"yesterday"`),
		replace(`"time":"2026-01-02T03:04:05Z"`, `"time":12`),
		replace(`"fieldsV1":{"f:metadata":{"f:labels":{"f:app":{}}}}`, `"fieldsV1":"anything"`),
		`{"managedFields":{}}`,
		`{"managedFields":"x"}`,
		`{"managedFields":[3]}`,
		`{"finalizers":[1]}`,
		`{"ownerReferences":[{"uid":1}]}`,
		`{"deletionGracePeriodSeconds":"1"}`,
		`{"generateName":1}`,
		`{"selfLink":false}`,
		`{"creationTimestamp":"now"}`,
		`{"annotations":{"a":1}}`,
	} {
		data := []byte(`{"apiVersion":"example.io/v1","kind":"Widget","metadata":` + meta + `,"spec":{}}`)
		var full metav1.ObjectMeta
		fullErr := unmarshalMeta([]byte(meta), &full)
		var o Object
		err := decodeStored(data, &o)
		if (err == nil) != (fullErr == nil) {
			t.Errorf("metadata %s: decodeStored says %v, ObjectMeta %v", meta, err, fullErr)
			continue
		}
		if err != nil {
			continue
		}
		if got := o.full(); !reflect.DeepEqual(got, &full) {
			t.Errorf("metadata %s: reads back as\n%+v\nnot\n%+v", meta, got, &full)
		}
		shard, cluster := o.PartitionAnnotations()
		if a := full.Annotations; shard != a[kcpcache.AnnotationShard] || cluster != a[kcpcache.AnnotationCluster] {
			t.Errorf("metadata %s: partition %q/%q", meta, shard, cluster)
		}
	}
}

// BenchmarkDecodeStored decodes a kcp object as a watch cache's fill does.
func BenchmarkDecodeStored(b *testing.B) {
	data := []byte(fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":%s,"spec":{"description":%q}}`, kcpMeta, strings.Repeat("x", 1024)))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var o Object
		if err := decodeStored(data, &o); err != nil {
			b.Fatal(err)
		}
	}
}

// A cached object's name, namespace and uid are its stored bytes', not
// copies: the watch cache holds one object per cached object, and each copy
// was an allocation of its own.
func TestDecodeStoredSharesNamesWithTheStoredBytes(t *testing.T) {
	meta := `{"name":"export-1","namespace":"ns-1","uid":"6f2c1234-5678-9abc-def0-123456789abc","annotations":{"kcp.io/cluster":"root:org"}}`
	data := []byte(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":` + meta + `,"spec":{}}`)
	var o Object
	if err := decodeStored(data, &o); err != nil {
		t.Fatal(err)
	}
	within := func(s string) bool {
		start := uintptr(unsafe.Pointer(unsafe.StringData(o.data)))
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return p >= start && p+uintptr(len(s)) <= start+uintptr(len(o.data))
	}
	for field, v := range map[string]string{"name": o.GetName(), "namespace": o.GetNamespace(), "uid": string(o.GetUID())} {
		if !within(v) {
			t.Errorf("%s %q is a copy, not the stored bytes'", field, v)
		}
	}
	if o.GetName() != "export-1" || o.GetNamespace() != "ns-1" || o.GetUID() != "6f2c1234-5678-9abc-def0-123456789abc" {
		t.Errorf("read back %q/%q %q", o.GetNamespace(), o.GetName(), o.GetUID())
	}

	// An escaped name is not in the bytes as it reads: it stays a copy.
	escaped := []byte(`{"apiVersion":"v1","kind":"K","metadata":{"name":"a\u002db"},"spec":{}}`)
	if err := decodeStored(escaped, &o); err != nil {
		t.Fatal(err)
	}
	if o.GetName() != "a-b" {
		t.Errorf("escaped name read back as %q", o.GetName())
	}
}
