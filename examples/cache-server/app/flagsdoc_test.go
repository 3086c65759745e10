package app

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// docs/flags.md is generated from the flag sets; a flag added, removed or
// changed without regenerating it fails here.
func TestFlagsDocIsCurrent(t *testing.T) {
	want, err := FlagsDoc()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", FlagsDocPath)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; write it with: %s", err, FlagsDocCommand)
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
			t.Fatalf("%s is out of date with the flags (first difference, line %d):\n  file:  %s\n  flags: %s\nregenerate it from the module's root with: %s",
				FlagsDocPath, i+1, g, w, FlagsDocCommand)
		}
	}
}
