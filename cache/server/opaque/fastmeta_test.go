package opaque

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// fastMetaCases are metadata texts around the shape Codec writes: each is
// either taken by fastMeta or left to the general decoder.
var fastMetaCases = []string{
	kcpMeta,
	`{}`,
	` { "name" : "a" , "generation" : -0 } `,
	`{"name":"a","name":"b"}`,
	`{"labels":{"a":"1"},"labels":{"b":"2"}}`,
	`{"labels":{"a":"1","a":"2"}}`,
	`{"labels":{},"annotations":{},"finalizers":[],"managedFields":[]}`,
	`{"labels":null}`,
	`{"labels":{"a":null}}`,
	`{"name":"caf\u00e9"}`,
	`{"name":"café"}`,
	"{\"name\":\"\xff\"}",
	"{\"other\":\"\xff\"}",
	`{"name":"tab	"}`,
	`{"generation":01}`,
	`{"generation":1.0}`,
	`{"generation":1e3}`,
	`{"generation":9223372036854775807}`,
	`{"generation":9223372036854775808}`,
	`{"generation":-}`,
	`{"deletionTimestamp":"2026-01-02T03:04:05+01:00","deletionGracePeriodSeconds":30}`,
	`{"deletionTimestamp":null}`,
	`{"creationTimestamp":"2026-01-02T03:04:05.123456789Z"}`,
	`{"creationTimestamp":"2026-13-02T03:04:05Z"}`,
	`{"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"o","uid":"u"}]}`,
	`{"ownerReferences":[{"name":"o","controller":true,"blockOwnerDeletion":false,"name":"p","x":{}}]}`,
	`{"ownerReferences":[{"controller":null}]}`,
	`{"ownerReferences":[{"controller":"true"}]}`,
	`{"ownerReferences":[]}`,
	`{"ownerReferences":[null]}`,
	`{"Name":"case","managedfields":3}`,
	`{"unknown":[1,-2.5e+3,true,false,null,{"a":"\u00e9\n"},[]]}`,
	`{"unknown":[1,]}`,
	`{"unknown":01}`,
	`{"unknown":"\x"}`,
	`{"unknown":"\u12g4"}`,
	`{"unknown":.5}`,
	`{"unknown":1.}`,
	`{"unknown":1e}`,
	`{"unknown":tru}`,
	`{"managedFields":[null,{},{"time":null,"manager":null},{"fieldsV1":{"f:a":{".":{}}},"x":[{}]}]}`,
	`{"managedFields":[{"manager":"a\"b"}]}`,
	`{"managedFields":[{"manag\u0065r":3}]}`,
	`{"managedFields":[{"fieldsV1":{"k:{\"a\":1}":{},"k:{\"a\":1}":{"x":"\u00e9"}}}]}`,
	`{"unknown":{"a\"b":1,"a\u0022b":[{"\n":null}]}}`,
	`{"unknown":{"a\x":1}}`,
	`{"unknown":{"a":1,}}`,
	`{"managedFields":[{"manager":3}]}`,
	`{"managedFields":[{"time":"2026-01-02T03:04:05\u002B01:00"}]}`,
	`{"managedFields":[{"time":12}]}`,
	`{"managedFields":[3]}`,
	`{"managedFields":{}}`,
	`{"name":"a"} `,
	`{"name":"a"}x`,
	`{"name":"a",}`,
	`{"name" "a"}`,
	`{"finalizers":["a",1]}`,
	`{"annotations":{"a":1}}`,
	`{"unknown":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
}

// Where fastMeta takes metadata, the general decoder decodes it too, to the
// same storedMeta: fastMeta is only a faster way to the same answer.
func TestFastMetaAgreesWithTheGeneralDecoder(t *testing.T) {
	taken := 0
	for _, meta := range fastMetaCases {
		if checkFastMeta(t, []byte(meta)) {
			taken++
		}
	}
	if taken < 10 {
		t.Errorf("fastMeta took %d of %d cases: it no longer takes the shape Codec writes", taken, len(fastMetaCases))
	}
}

// What Codec writes, fastMeta takes: otherwise a fill pays the general
// decoder for every object.
func TestFastMetaTakesWhatCodecWrites(t *testing.T) {
	data := []byte(`{"apiVersion":"example.io/v1","kind":"Widget","metadata":` + kcpMeta + `,"spec":{"a":1}}`)
	sent := &Object{}
	if err := decodeRequest(data, sent); err != nil {
		t.Fatal(err)
	}
	sent.SetDeletionTimestamp(&metav1.Time{Time: sent.GetCreationTimestamp().Time})
	grace := int64(30)
	sent.SetDeletionGracePeriodSeconds(&grace)
	var stored bytes.Buffer
	if err := (Codec{MaxObjectBytes: 1 << 20}).Encode(sent, &stored); err != nil {
		t.Fatal(err)
	}
	p, err := split(stored.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var m storedMeta
	if !fastMeta(p.meta, &m) {
		t.Fatalf("fastMeta leaves the metadata Codec wrote to the general decoder: %s", p.meta)
	}
	checkFastMeta(t, p.meta)
}

// FuzzFastMeta holds fastMeta to the general decoder on any text.
func FuzzFastMeta(f *testing.F) {
	for _, meta := range fastMetaCases {
		f.Add([]byte(meta))
	}
	f.Fuzz(func(t *testing.T, meta []byte) { checkFastMeta(t, meta) })
}

// checkFastMeta reports whether fastMeta took meta, failing t where it took
// what the general decoder refuses or decodes otherwise.
func checkFastMeta(t *testing.T, meta []byte) bool {
	t.Helper()
	var fast storedMeta
	if !fastMeta(meta, &fast) {
		return false
	}
	var general storedMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(meta, &general); err != nil {
		t.Errorf("fastMeta takes %s, which the general decoder refuses: %v", meta, err)
		return true
	}
	if !reflect.DeepEqual(fast, general) {
		t.Errorf("metadata %s: fastMeta decodes\n%+v\nthe general decoder\n%+v", meta, fast, general)
	}
	return true
}
