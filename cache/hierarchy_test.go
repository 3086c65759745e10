package cache

import "testing"

// A --pass-on list names resources as <resource>.<group>; an identity
// resource (kcp's "<resource>:<identity>") is passed on with its resource.
func TestPassesOn(t *testing.T) {
	list := []string{"apiexports.apis.kcp.io", "configmaps"}
	for gr, want := range map[string]bool{
		"apiexports.apis.kcp.io":         true,
		"apiexports:abc123.apis.kcp.io":  true,
		"apiresourceschemas.apis.kcp.io": false,
		"configmaps":                     true,
		"apiexports.other.io":            false,
		"widgets:abc.example.io":         false,
	} {
		if got := PassesOn(list, gr); got != want {
			t.Errorf("PassesOn(%v, %q) = %v, want %v", list, gr, got, want)
		}
	}
	if !PassesOn(nil, "anything.example.io") {
		t.Error("an empty list passes nothing on; it should pass on everything")
	}
}
