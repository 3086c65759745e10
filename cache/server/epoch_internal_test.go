package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/storage/storagebackend"
)

// Storage without etcd (data that dies with the process) starts a new epoch
// at every start.
func TestEpochWithoutEtcdIsNewAtEveryStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), epochFileName)
	epochs := map[string]bool{}
	for range 2 {
		k, err := newEpochKeeper(storagebackend.Config{}, file)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.resolve(context.Background()); err != nil {
			t.Fatal(err)
		}
		k.close(context.Background())
		if !strings.HasPrefix(k.Epoch(), "process-") || epochs[k.Epoch()] {
			t.Fatalf("epoch %q (seen before: %v)", k.Epoch(), epochs[k.Epoch()])
		}
		epochs[k.Epoch()] = true
	}
}
