package authorization

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// docs/security.md shows the rules as rules.go has them; a rule added,
// removed, reordered or reworded without regenerating the table fails here.
func TestPolicyDocIsCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "..", PolicyDocPath)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := WithPolicyDoc(got)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gotLines, wantLines := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := 0; i < len(gotLines) || i < len(wantLines); i++ {
		var g, w []byte
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if !bytes.Equal(g, w) {
			t.Fatalf("%s is out of date with the rules (first difference, line %d):\n  file:  %s\n  rules: %s\nregenerate it from the module's root with: %s",
				PolicyDocPath, i+1, g, w, PolicyDocCommand)
		}
	}
}

// Every rule is named once, and the table's markers are found.
func TestRuleNamesAreUnique(t *testing.T) {
	seen := map[Rule]bool{defaultDeny.name: true}
	for _, r := range rules {
		if seen[r.name] {
			t.Errorf("rule %q appears twice", r.name)
		}
		seen[r.name] = true
		if (r.reason == nil) != (r.decision != authorizer.DecisionDeny) {
			t.Errorf("rule %q: a denial needs a reason, an allowance has none", r.name)
		}
	}
	if _, err := WithPolicyDoc([]byte("no markers")); err == nil {
		t.Error("a document without markers is accepted")
	}
}
