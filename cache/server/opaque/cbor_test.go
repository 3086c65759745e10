package opaque

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// decodeCBOR decodes data as client-go's dynamic client decodes a CBOR
// response.
func decodeCBOR(t *testing.T, data []byte) map[string]interface{} {
	t.Helper()
	u := &unstructured.Unstructured{}
	if _, _, err := cbor.NewSerializer(nil, nil).Decode(data, nil, u); err != nil {
		t.Fatalf("upstream's CBOR decoder refuses the output: %v", err)
	}
	return u.Object
}

func TestCBORTranscodingDecodesAsTheJSONDoes(t *testing.T) {
	many := make([]string, 30)
	keys := make([]string, 30)
	for i := range many {
		many[i] = fmt.Sprint(i * 1000)
		keys[i] = fmt.Sprintf(`"k%d":%d`, i, -i)
	}
	for name, spec := range map[string]string{
		"empty":               `{}`,
		"scalars":             `{"t":true,"f":false,"n":null,"s":"x","e":""}`,
		"integers":            `{"a":0,"b":-1,"c":23,"d":24,"e":255,"f":256,"g":65536,"h":4294967296,"i":-9223372036854775808,"j":9223372036854775807,"k":-0}`,
		"beyond int64":        `{"a":9223372036854775808,"b":-9223372036854775809,"c":123456789012345678901234567890}`,
		"floats":              `{"a":1.5,"b":-0.25,"c":1e2,"d":1E-7,"e":1.0,"f":0.1}`,
		"escapes":             `{"a":"\"q\\\/\b\f\n\r\t","b":"\u00e9\u2028\ud83d\ude00","c\u0041":1}`,
		"utf-8":               `{"a":"é — 😀","b":"ok"}`,
		"invalid utf-8":       "{\"a\":\"\xff\xfe x\",\"b\":\"\xc3\"}",
		"nested":              `{"a":[[],[{}],[1,[2,[3]]]],"b":{"c":{"d":{"e":"f"}}}}`,
		"long array":          `{"a":[` + strings.Join(many, ",") + `]}`,
		"many members":        `{` + strings.Join(keys, ",") + `}`,
		"long string":         `{"a":"` + strings.Repeat("x", 300) + `","b":"` + strings.Repeat("y", 70000) + `"}`,
		"whitespace":          " { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ",
		"duplicate member":    `{"a":{"x":1,"x":2},"b":1}`,
		"duplicate of many":   `{"a":{` + strings.Join(keys, ",") + `,"k3":"last"}}`,
		"escaped duplicate":   `{"a":{"x":1,"\u0078":2}}`,
		"duplicates deep":     `{"a":[{"b":[{"c":1,"c":[1,2]}]}]}`,
		"not duplicate, case": `{"a":{"x":1,"X":2}}`,
	} {
		t.Run(name, func(t *testing.T) {
			data := []byte(`{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w"},"spec":` + spec + `}`)
			var want map[string]interface{}
			if err := utiljson.Unmarshal(data, &want); err != nil {
				t.Fatalf("the JSON of the case: %v", err)
			}
			got, err := appendCBORFromJSON(append([]byte(nil), cborSelfDescribed...), data)
			if err != nil {
				t.Fatalf("transcoding: %v", err)
			}
			if g := decodeCBOR(t, got); !reflect.DeepEqual(g, want) {
				t.Errorf("decoded from CBOR:\n%#v\nfrom JSON:\n%#v", g["spec"], want["spec"])
			}
		})
	}
}

func TestCBORTranscodingRefusesWhatIsNotJSON(t *testing.T) {
	for _, data := range []string{``, `{`, `{"a"}`, `{"a":1,}`, `{"a":tru}`, `{"a":1}x`, `{"a":[1 2]}`, `{"a":"x}`, `{"a":-}`} {
		if _, err := appendCBORFromJSON(nil, []byte(data)); err == nil {
			t.Errorf("%q transcoded without an error", data)
		}
	}
}

// cborEncoder is the encoder a handler gets for a client that asked for
// application/cbor.
func cborEncoder(t *testing.T, gv schema.GroupVersion) runtime.Encoder {
	t.Helper()
	s := NewSerializer(widget, WithCBOR())
	info, ok := runtime.SerializerInfoForMediaType(s.SupportedMediaTypes(), runtime.ContentTypeCBOR)
	if !ok {
		t.Fatalf("WithCBOR: no %s among %v", runtime.ContentTypeCBOR, s.SupportedMediaTypes())
	}
	return s.EncoderForVersion(runtime.UseNondeterministicEncoding(info.Serializer), gv)
}

func TestCBORListHoldsWhatTheJSONListHolds(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.io", Version: "v2"}
	remaining := int64(7)
	l := &ObjectList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next", RemainingItemCount: &remaining}}
	for i := 0; i < 40; i++ {
		o := decodeStoredT(t, strings.Replace(stored, `"name":"w"`, fmt.Sprintf(`"name":"w%d"`, i), 1))
		o.SetResourceVersion(fmt.Sprint(i + 1))
		if i == 3 {
			o.SetLabels(map[string]string{"changed": "yes"}) // metadata encoded from the parsed fields
		}
		l.Items = append(l.Items, *o)
	}
	l.Items = append(l.Items, *decodeStoredT(t, `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"dup"},"spec":{"a":1,"a":2}}`))

	var js, cb bytes.Buffer
	if err := NewSerializer(widget).EncoderForVersion(NewSerializer(widget).SupportedMediaTypes()[0].Serializer, gv).Encode(l, &js); err != nil {
		t.Fatal(err)
	}
	if err := cborEncoder(t, gv).Encode(l, &cb); err != nil {
		t.Fatal(err)
	}
	var want map[string]interface{}
	if err := utiljson.Unmarshal(js.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(cb.Bytes(), cborSelfDescribed) {
		t.Errorf("the CBOR list does not start with the self-described tag: % x", cb.Bytes()[:3])
	}
	if got := decodeCBOR(t, cb.Bytes()); !reflect.DeepEqual(got, want) {
		t.Errorf("CBOR list:\n%v\nJSON list:\n%v", got, want)
	}
	// As client-go's dynamic client reads it.
	ul := &unstructured.UnstructuredList{}
	if _, _, err := cbor.NewSerializer(nil, nil).Decode(cb.Bytes(), nil, ul); err != nil {
		t.Fatal(err)
	}
	if len(ul.Items) != 41 || ul.GetResourceVersion() != "42" || ul.GetContinue() != "next" || ul.Items[3].GetLabels()["changed"] != "yes" || ul.Items[0].GetAPIVersion() != "example.io/v2" {
		t.Errorf("list read back: %d items, rv %q, continue %q, labels of item 3 %v", len(ul.Items), ul.GetResourceVersion(), ul.GetContinue(), ul.Items[3].GetLabels())
	}
}

func TestCBORObjectAndOtherTypes(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.io", Version: "v1"}
	o := decodeStoredT(t, stored)
	o.SetResourceVersion("9")
	var js, cb bytes.Buffer
	if err := NewSerializer(widget).EncoderForVersion(NewSerializer(widget).SupportedMediaTypes()[0].Serializer, gv).Encode(o, &js); err != nil {
		t.Fatal(err)
	}
	enc := cborEncoder(t, gv)
	if err := enc.Encode(o, &cb); err != nil {
		t.Fatal(err)
	}
	var want map[string]interface{}
	if err := utiljson.Unmarshal(js.Bytes(), &want); err != nil {
		t.Fatal(err)
	}
	if got := decodeCBOR(t, cb.Bytes()); !reflect.DeepEqual(got, want) {
		t.Errorf("CBOR object:\n%v\nJSON object:\n%v", got, want)
	}
	if enc.Identifier() == NewSerializer(widget).EncoderForVersion(NewSerializer(widget).SupportedMediaTypes()[0].Serializer, gv).Identifier() {
		t.Errorf("the CBOR and JSON encoders share the identifier %q: the watch cache would hand one's encoding to the other", enc.Identifier())
	}
	// A Status goes through upstream's CBOR encoder.
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 404, Message: "not found"}
	var st bytes.Buffer
	if err := enc.Encode(status, &st); err != nil {
		t.Fatal(err)
	}
	if got := decodeCBOR(t, st.Bytes()); got["kind"] != "Status" || got["message"] != status.Message {
		t.Errorf("Status in CBOR: %v", got)
	}
}

func TestJSONStaysTheDefault(t *testing.T) {
	for _, s := range []*Serializer{NewSerializer(widget), NewSerializer(widget, WithCBOR())} {
		if mt := s.SupportedMediaTypes()[0].MediaType; mt != runtime.ContentTypeJSON {
			t.Errorf("the first (default) media type is %s", mt)
		}
	}
	if _, ok := runtime.SerializerInfoForMediaType(NewSerializer(widget).SupportedMediaTypes(), runtime.ContentTypeCBOR); ok {
		t.Errorf("a serializer without WithCBOR offers CBOR")
	}
}
