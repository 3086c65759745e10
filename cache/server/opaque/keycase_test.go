package opaque

import (
	"strings"
	"testing"
)

func TestCheckKeys(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		refused    string // a fragment of the error; "" when accepted
	}{
		{"plain object", `{"apiVersion":"v1","kind":"K","metadata":{"name":"a","annotations":{"Annotations":"x"}},"spec":{"Metadata":1,"KIND":2}}`, ""},
		{"no metadata", `{"apiVersion":"v1","kind":"K"}`, ""},
		{"null metadata", `{"apiVersion":"v1","kind":"K","metadata":null}`, ""},
		{"Metadata", `{"metadata":{},"Metadata":{}}`, `"Metadata" can be read as metadata`},
		{"KIND", `{"kind":"K","KIND":"L"}`, `"KIND" can be read as kind`},
		{"apiversion", `{"apiversion":"v1"}`, `"apiversion" can be read as apiVersion`},
		{"Kelvin sign", `{"kind":"K","` + "\u212a" + `ind":"L"}`, `can be read as kind`},
		{"escaped name", `{"metadata":{},"\u006detadata":{}}`, `can be read as metadata`},
		{"twice", `{"kind":"K","kind":"L"}`, `kind appears more than once`},
		{"metadata.Annotations", `{"metadata":{"Annotations":{}}}`, `metadata."Annotations" can be read as metadata.annotations`},
		{"metadata.resourceversion", `{"metadata":{"resourceversion":"1"}}`, `can be read as metadata.resourceVersion`},
		{"metadata.name twice", `{"metadata":{"name":"a", "name":"b"}}`, `metadata.name appears more than once`},
		{"spaces", ` { "metadata" : { "NAME" : "a" } } `, `can be read as metadata.name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKeys([]byte(tt.body))
			switch {
			case tt.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
				t.Errorf("got %v, want an error with %q", err, tt.refused)
			}
		})
	}
}

func TestCheckJSONPatchKeys(t *testing.T) {
	for _, tt := range []struct {
		name, patch string
		refused     bool
	}{
		{"spec", `[{"op":"add","path":"/spec/Metadata","value":1}]`, false},
		{"labels", `[{"op":"add","path":"/metadata/labels/Name","value":"x"}]`, false},
		{"annotation with a slash", `[{"op":"add","path":"/metadata/annotations/kcp.io~1shard","value":"x"}]`, false},
		{"Metadata", `[{"op":"add","path":"/Metadata","value":{}}]`, true},
		{"metadata.Annotations", `[{"op":"add","path":"/metadata/Annotations","value":{}}]`, true},
		{"a metadata value", `[{"op":"replace","path":"/metadata","value":{"Name":"x"}}]`, true},
		{"a whole object", `[{"op":"replace","path":"","value":{"KIND":"x"}}]`, true},
		{"a copy into Kind", `[{"op":"copy","from":"/kind","path":"/Kind"}]`, true},
		{"not a patch", `{"op":"add"}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckJSONPatchKeys([]byte(tt.patch)); (err != nil) != tt.refused {
				t.Errorf("got %v, want refused=%v", err, tt.refused)
			}
		})
	}
}
