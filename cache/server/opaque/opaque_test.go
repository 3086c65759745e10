package opaque

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

var widget = Type{Group: "example.io", Kind: "Widget", ListKind: "WidgetList"}

const stored = `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","uid":"u-1","annotations":{"a":"b"}},"spec":{"x":[1,{"y":"}"}]},"status":{"z":"\"q"}}`

func decodeStoredT(t *testing.T, data string) *Object {
	t.Helper()
	obj, _, err := Codec{}.Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return obj.(*Object)
}

func encodeAs(t *testing.T, obj runtime.Object, gv schema.GroupVersion) string {
	t.Helper()
	var buf bytes.Buffer
	enc := NewSerializer(widget).EncoderForVersion(NewSerializer(widget).SupportedMediaTypes()[0].Serializer, gv)
	if err := enc.Encode(obj, &buf); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.String()
}

// sameJSON compares documents semantically, independent of member order.
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w interface{}
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("expectation is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestStoredObjectIsServedUnderTheRequestedVersion(t *testing.T) {
	o := decodeStoredT(t, stored)
	if o.GetName() != "w" || o.GetUID() != "u-1" || o.GetAnnotations()["a"] != "b" || o.APIVersion != "example.io/v1" {
		t.Fatalf("metadata not parsed: %+v", o.full())
	}
	o.SetResourceVersion("42")
	sameJSON(t, encodeAs(t, o, schema.GroupVersion{Group: "example.io", Version: "v2"}),
		`{"apiVersion":"example.io/v2","kind":"Widget","metadata":{"name":"w","uid":"u-1","resourceVersion":"42","annotations":{"a":"b"}},"spec":{"x":[1,{"y":"}"}]},"status":{"z":"\"q"}}`)
}

func TestMetadataSetterIsReflectedInTheEncoding(t *testing.T) {
	o := decodeStoredT(t, stored)
	c := o.DeepCopy()
	c.SetLabels(map[string]string{"l": "v"})
	sameJSON(t, encodeAs(t, c, schema.GroupVersion{Group: "example.io", Version: "v1"}),
		`{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","uid":"u-1","labels":{"l":"v"},"annotations":{"a":"b"}},"spec":{"x":[1,{"y":"}"}]},"status":{"z":"\"q"}}`)
	// The original keeps its own metadata.
	if o.GetLabels() != nil || !strings.Contains(encodeAs(t, o, schema.GroupVersion{Group: "example.io", Version: "v1"}), `"annotations":{"a":"b"}}`) {
		t.Errorf("changing a copy changed the original")
	}
	// Through meta.Accessor-style access too.
	var m metav1.Object = o.DeepCopy()
	m.SetAnnotations(nil)
	if strings.Contains(encodeAs(t, m.(*Object), schema.GroupVersion{Group: "example.io", Version: "v1"}), "annotations") {
		t.Errorf("SetAnnotations through metav1.Object was not reflected")
	}
}

func TestStorageEncodingOmitsResourceVersionAndRoundTrips(t *testing.T) {
	o := decodeStoredT(t, stored)
	o.SetResourceVersion("7")
	var buf bytes.Buffer
	if err := (Codec{}).Encode(o, &buf); err != nil {
		t.Fatal(err)
	}
	sameJSON(t, buf.String(), stored)
	if strings.Contains(buf.String(), "resourceVersion") {
		t.Errorf("stored bytes carry a resourceVersion: %s", buf.String())
	}
}

func TestSplitHandlesAnyMemberOrder(t *testing.T) {
	want := `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"a":1},"status":2}`
	// Strings that hold what split looks for: quotes, braces, a key named
	// metadata, backslashes and a unicode escape.
	tricky := `{"apiVersion":"example.io/v1","kind":"Widget","spec":{"a":"}\"metadata\":{\"name\":\"x\"}","metadata":{"b":"\\"}},"metadata":{"name":"w","annotations":{"k":"{\"\u007d"}},"status":"\"kind\":\"Gadget\""}`
	cases := map[string]struct{ in, want string }{
		"metadata last":       {`{"spec":{"a":1},"status":2,"kind":"Widget","apiVersion":"example.io/v1","metadata":{"name":"w"}}`, want},
		"metadata in between": {`{"spec":{"a":1},"metadata":{"name":"w"},"status":2,"kind":"Widget","apiVersion":"example.io/v1"}`, want},
		"whitespace":          {"{ \"apiVersion\" : \"example.io/v1\" ,\n \"kind\":\"Widget\", \"metadata\" : {\"name\":\"w\"} , \"spec\" : {\"a\" : 1}, \"status\":2 }", want},
		"escapes in strings":  {tricky, tricky},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := decodeStoredT(t, tc.in)
			if o.GetName() != "w" || o.Kind != "Widget" {
				t.Errorf("decoded name %q, kind %q; want w, Widget", o.GetName(), o.Kind)
			}
			sameJSON(t, encodeAs(t, o, schema.GroupVersion{Group: "example.io", Version: "v1"}), tc.want)
		})
	}
}

// "metadata": null is metadata that is absent, not an error.
func TestNullMetadataIsAbsentMetadata(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.io", Version: "v1"}
	null := decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","metadata":null,"spec":{"a":1}}`)
	absent := decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","spec":{"a":1}}`)
	if null.GetName() != "" || len(null.GetAnnotations()) != 0 {
		t.Errorf("null metadata decoded as name %q, annotations %v", null.GetName(), null.GetAnnotations())
	}
	sameJSON(t, encodeAs(t, null, gv), encodeAs(t, absent, gv))
	if strings.Contains(encodeAs(t, null, gv), `"metadata":null`) {
		t.Errorf("null metadata encoded as null: %s", encodeAs(t, null, gv))
	}
}

func TestListEncoding(t *testing.T) {
	a, b := decodeStoredT(t, stored), decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"v"}}`)
	a.SetResourceVersion("3")
	b.SetResourceVersion("5")
	n := int64(9)
	l := &ObjectList{ListMeta: metav1.ListMeta{ResourceVersion: "6", Continue: "tok", RemainingItemCount: &n}, Items: []Object{*a, *b}}
	sameJSON(t, encodeAs(t, l, schema.GroupVersion{Group: "example.io", Version: "v2"}), `{"apiVersion":"example.io/v2","kind":"WidgetList",
		"metadata":{"resourceVersion":"6","continue":"tok","remainingItemCount":9},
		"items":[
		 {"apiVersion":"example.io/v2","kind":"Widget","metadata":{"name":"w","uid":"u-1","resourceVersion":"3","annotations":{"a":"b"}},"spec":{"x":[1,{"y":"}"}]},"status":{"z":"\"q"}},
		 {"apiVersion":"example.io/v2","kind":"Widget","metadata":{"name":"v","resourceVersion":"5"}}]}`)
	sameJSON(t, encodeAs(t, &ObjectList{}, schema.GroupVersion{Group: "example.io", Version: "v1"}),
		`{"apiVersion":"example.io/v1","kind":"WidgetList","metadata":{},"items":[]}`)
}

func TestEncoderDelegatesMetaTypes(t *testing.T) {
	got := encodeAs(t, &metav1.Status{Status: metav1.StatusSuccess}, schema.GroupVersion{Group: "example.io", Version: "v1"})
	sameJSON(t, got, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`)
}

func TestRequestDecoding(t *testing.T) {
	dec := NewSerializer(widget).DecoderToVersion(nil, schema.GroupVersion{Group: "example.io", Version: "v1"})
	defaults := &schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Widget"}

	obj, gvk, err := dec.Decode([]byte("{\"apiVersion\":\"example.io/v1\",\"kind\":\"Widget\",\"metadata\": {\"name\": \"n\", \"resourceVersion\": \"9\"},\n \"spec\": {\"k\": \"v\"}}"), defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := obj.(*Object)
	if *gvk != *defaults || o.GetName() != "n" || o.GetResourceVersion() != "9" || o.Body() != `"spec":{"k":"v"}` {
		t.Errorf("decoded %v %+v body %s", gvk, o.full(), o.Body())
	}

	for name, body := range map[string]string{
		"not JSON":           `{"metadata":`,
		"not an object":      `[1,2]`,
		"metadata a string":  `{"metadata":"x"}`,
		"kind a number":      `{"kind":1}`,
		"no kind":            `{"apiVersion":"example.io/v1","metadata":{"name":"n"}}`,
		"no apiVersion":      `{"kind":"Widget","metadata":{"name":"n"}}`,
		"bad metadata field": `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":7}}`,
		"trailing garbage":   `{"metadata":{}} x`,
	} {
		if _, _, err := dec.Decode([]byte(body), defaults, nil); err == nil {
			t.Errorf("%s: decoded %s without error", name, body)
		}
	}
}

func TestCodecRefusesObjectsOverTheLimit(t *testing.T) {
	o := decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w"}}`)
	o.SetBody(`"spec":"` + strings.Repeat("x", 200) + `"`)
	err := Codec{MaxObjectBytes: 100}.Encode(o, &bytes.Buffer{})
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("got %v, want 413", err)
	}
}

func TestDeepCopyOwnsMetadataAndSharesBody(t *testing.T) {
	o := decodeStoredT(t, stored)
	c := o.DeepCopyObject().(*Object)
	c.SetAnnotations(map[string]string{"a": "changed"})
	if o.GetAnnotations()["a"] != "b" || c.GetAnnotations()["a"] != "changed" {
		t.Errorf("copy and original share annotations: %v %v", o.GetAnnotations(), c.GetAnnotations())
	}
	if unsafe.StringData(c.Body()) != unsafe.StringData(o.Body()) {
		t.Errorf("copy does not share the body")
	}
}

func TestStoredTypeNamesAreHeldOnce(t *testing.T) {
	a, b := decodeStoredT(t, stored), decodeStoredT(t, stored)
	if unsafe.StringData(a.APIVersion) != unsafe.StringData(b.APIVersion) || unsafe.StringData(a.Kind) != unsafe.StringData(b.Kind) {
		t.Errorf("two decodes hold two copies of apiVersion and kind")
	}
}

// A partial object (decoded from storage) answers every metadata field, and
// keeps the ones it does not hold when another one changes.
func TestPartialMetadataIsCompleteWhenReadAndChanged(t *testing.T) {
	const full = `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","generateName":"w-","uid":"u","generation":3,` +
		`"creationTimestamp":"2026-01-02T03:04:05Z","deletionGracePeriodSeconds":5,"labels":{"l":"1"},` +
		`"annotations":{"kcp.io/shard":"s1","kcp.io/cluster":"c1","x":"y"},` +
		`"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"o","uid":"ou"}],"finalizers":["f"],` +
		`"managedFields":[{"manager":"m","operation":"Update"}]},"spec":{}}`
	o := decodeStoredT(t, full)
	if o.meta != nil {
		t.Fatalf("an object from storage is not partial")
	}
	check := func(name string, m metav1.Object) {
		t.Helper()
		if m.GetName() != "w" || m.GetGenerateName() != "w-" || m.GetUID() != "u" || m.GetGeneration() != 3 ||
			m.GetCreationTimestamp().Unix() != 1767323045 || *m.GetDeletionGracePeriodSeconds() != 5 ||
			m.GetLabels()["l"] != "1" || m.GetAnnotations()["x"] != "y" || m.GetOwnerReferences()[0].Name != "o" ||
			m.GetFinalizers()[0] != "f" || m.GetManagedFields()[0].Manager != "m" {
			t.Errorf("%s: metadata incomplete: %+v", name, m)
		}
	}
	check("partial", o)
	if s, c := o.PartitionAnnotations(); s != "s1" || c != "c1" {
		t.Errorf("partition annotations %q %q", s, c)
	}

	changed := o.DeepCopy()
	changed.SetLabels(map[string]string{"l": "1"})
	if changed.meta == nil || changed.rawMetaValid {
		t.Errorf("a setter left the object partial or its stored bytes valid")
	}
	check("changed", changed)
	var buf bytes.Buffer
	if err := (Codec{}).Encode(changed, &buf); err != nil {
		t.Fatal(err)
	}
	check("stored again", decodeStoredT(t, buf.String()))
}

// Server-side apply reads objects by reflection (structured-merge-diff's
// deduced types) and converts maps back into them: both must see the whole
// object, shaped as on the wire.
func TestReflectionSeesTheWholeObject(t *testing.T) {
	o := decodeStoredT(t, stored)
	o.SetResourceVersion("4")
	tv, err := typed.DeducedParseableType.FromStructured(o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(tv.AsValue().Unstructured())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","uid":"u-1","resourceVersion":"4","annotations":{"a":"b"}},"spec":{"x":[1,{"y":"}"}]},"status":{"z":"\"q"}}`
	sameJSON(t, string(got), want)

	back := &Object{}
	var content map[string]interface{}
	if err := json.Unmarshal([]byte(want), &content); err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, back); err != nil {
		t.Fatal(err)
	}
	if back.GetName() != "w" || back.GetAnnotations()["a"] != "b" || !strings.Contains(back.Body(), `"spec":{"x":[1,{"y":"}"}]}`) {
		t.Errorf("converted back: %+v %s", back.full(), back.Body())
	}
}

func TestSemanticEqualityComparesContentNotRepresentation(t *testing.T) {
	fromStorage := decodeStoredT(t, stored)
	fromRequest := &Object{}
	if err := decodeRequest([]byte(stored), fromRequest); err != nil {
		t.Fatal(err)
	}
	if (fromStorage.meta == nil) == (fromRequest.meta == nil) {
		t.Fatalf("the two objects should differ in how much metadata they parsed")
	}
	if !equality.Semantic.DeepEqual(fromStorage, fromRequest) {
		t.Errorf("the same object read from storage and from a request are not equal")
	}
	for name, change := range map[string]func(o *Object){
		"label":           func(o *Object) { o.SetLabels(map[string]string{"l": "v"}) },
		"annotation":      func(o *Object) { o.SetAnnotations(map[string]string{"a": "c"}) },
		"body":            func(o *Object) { o.SetBody(`"spec":{}`) },
		"resourceVersion": func(o *Object) { o.SetResourceVersion("7") },
		"managedFields timestamp": func(o *Object) {
			now := metav1.Now()
			o.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "example.io/v1", Time: &now}})
		},
	} {
		changed := fromStorage.DeepCopy()
		change(changed)
		if equality.Semantic.DeepEqual(fromStorage, changed) || equality.Semantic.DeepEqual(changed, fromRequest) {
			t.Errorf("objects that differ in their %s are equal", name)
		}
	}
}

// The registry compares the objects of every update whose managedFields
// changed only in their timestamps; reflection alone panics on Object.
func TestUpdateThatOnlyMovesManagedFieldsTimestampsIsCompared(t *testing.T) {
	entry := func(sec int) metav1.ManagedFieldsEntry {
		at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC))
		return metav1.ManagedFieldsEntry{Manager: "m", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "example.io/v1", Time: &at,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:x":{}}}`)}}
	}
	old := decodeStoredT(t, stored).DeepCopy()
	old.SetManagedFields([]metav1.ManagedFieldsEntry{entry(1)})
	for _, body := range []string{old.Body(), `"spec":{"x":[2]}`} {
		updated := old.DeepCopy()
		updated.SetBody(body)
		updated.SetManagedFields([]metav1.ManagedFieldsEntry{entry(2)})
		got, err := fieldmanager.IgnoreManagedFieldsTimestampsTransformer(context.Background(), updated, old)
		if err != nil {
			t.Fatal(err)
		}
		if ts := got.(*Object).GetManagedFields()[0].Time; !ts.Equal(entry(2).Time) {
			t.Errorf("body %s: the update's timestamp became %v", body, ts)
		}
	}
}

// The watch cache holds a partial Object for every cached object.
func TestObjectStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(Object{}); size > 224 {
		t.Errorf("Object is %d bytes, more than the 224-byte size class it was made to fit", size)
	}
}

func TestDeepCopyOfAPartialObjectOwnsItsHotMetadata(t *testing.T) {
	o := decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","labels":{"l":"1"},"deletionTimestamp":"2026-01-02T03:04:05Z"}}`)
	c := o.DeepCopy()
	c.GetLabels()["l"] = "changed"
	c.GetDeletionTimestamp().Time = c.GetDeletionTimestamp().Add(time.Hour)
	if o.GetLabels()["l"] != "1" || o.GetDeletionTimestamp().Unix() != 1767323045 {
		t.Errorf("changing a copy's labels or deletionTimestamp changed the original: %v %v", o.GetLabels(), o.GetDeletionTimestamp())
	}
}

func TestEmptyObjectTakesMetadata(t *testing.T) {
	o := NewObject("example.io/v1", "Widget")
	o.SetResourceVersion("3")
	o.SetName("w")
	o.SetAnnotations(map[string]string{"a": "b"})
	if o.GetName() != "w" || o.GetResourceVersion() != "3" || o.GetAnnotations()["a"] != "b" {
		t.Errorf("empty object after setters: %+v", o.full())
	}
	sameJSON(t, encodeAs(t, o, schema.GroupVersion{Group: "example.io", Version: "v1"}),
		`{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","resourceVersion":"3","annotations":{"a":"b"}}}`)
}
