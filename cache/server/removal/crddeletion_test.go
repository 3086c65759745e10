package removal

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Which CRD deletions are refused, and with which Kubernetes error.
func TestCRDDeletionIsRefusedForBootstrappedAndUsedTypes(t *testing.T) {
	inUse := map[string]bool{"used.example.dev": true}
	d := CRDDeletion{
		Bootstrapped: sets.New("apiexports.apis.kcp.io"),
		InUse: func(_ context.Context, name string) (bool, error) {
			if name == "unreachable.example.dev" {
				return false, errors.New("etcd is away")
			}
			return inUse[name], nil
		},
	}
	tests := []struct {
		verb, name string
		want       func(error) bool
		wantName   string
	}{
		{"delete", "unused.example.dev", func(err error) bool { return err == nil }, "allowed"},
		{"delete", "apiexports.apis.kcp.io", apierrors.IsForbidden, "Forbidden"},
		{"delete", "used.example.dev", apierrors.IsConflict, "Conflict"},
		{"deletecollection", "", apierrors.IsMethodNotSupported, "MethodNotAllowed"},
		{"delete", "unreachable.example.dev", apierrors.IsInternalError, "InternalError"},
	}
	for _, tt := range tests {
		t.Run(tt.verb+" "+tt.name, func(t *testing.T) {
			if err := d.Check(context.Background(), tt.verb, tt.name); !tt.want(err) {
				t.Errorf("got %v, want %s", err, tt.wantName)
			}
		})
	}
}
