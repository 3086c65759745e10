package epoch

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Storage without etcd (data that dies with the process) starts a new epoch
// at every start.
func TestEpochWithoutEtcdIsNewAtEveryStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), FileName)
	epochs := map[string]bool{}
	for range 2 {
		k, err := NewKeeper(nil, "", file)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Resolve(context.Background()); err != nil {
			t.Fatal(err)
		}
		k.Flush(context.Background())
		if !strings.HasPrefix(k.Epoch(), "process-") || epochs[k.Epoch()] {
			t.Fatalf("epoch %q (seen before: %v)", k.Epoch(), epochs[k.Epoch()])
		}
		epochs[k.Epoch()] = true
	}
}
