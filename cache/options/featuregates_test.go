package options

import (
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Not parallel: feature gates belong to the process.
func TestFeatureGates(t *testing.T) {
	complete := func(gates map[string]bool) error {
		o := NewOptions()
		o.RootDirectory = t.TempDir()
		o.FeatureGates = gates
		_, err := o.Complete()
		return err
	}
	if err := complete(nil); err != nil {
		t.Fatal(err)
	}
	if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Errorf("ListFromCacheSnapshot is on by default")
	}
	if err := complete(map[string]bool{string(features.ListFromCacheSnapshot): true}); err != nil {
		t.Fatal(err)
	}
	if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Errorf("--feature-gates=ListFromCacheSnapshot=true was not applied")
	}
	if err := complete(map[string]bool{"NoSuchGate": true}); err == nil {
		t.Errorf("an unknown gate was accepted")
	}
}
