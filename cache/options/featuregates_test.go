package options

import (
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// Not parallel: feature gates belong to the process.
func TestFeatureGates(t *testing.T) {
	snapshots := func() bool { return utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) }
	sizes := func() bool { return utilfeature.DefaultFeatureGate.Enabled(features.SizeBasedListCostEstimate) }
	restore := map[string]bool{string(features.ListFromCacheSnapshot): snapshots(), string(features.SizeBasedListCostEstimate): sizes()}
	t.Cleanup(func() {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(restore); err != nil {
			t.Error(err)
		}
	})
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.ListFromCacheSnapshot): true, string(features.SizeBasedListCostEstimate): true}); err != nil {
		t.Fatal(err)
	}
	complete := func(gates map[string]bool) CompletedOptions {
		o := NewOptions()
		o.RootDirectory = t.TempDir()
		o.FeatureGates = gates
		c, err := o.Complete()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Completing and validating options changes no gate: a host that
	// mounts a cache keeps its own.
	c := complete(nil)
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if !snapshots() || !sizes() {
		t.Fatal("Complete and Validate turned ListFromCacheSnapshot or SizeBasedListCostEstimate off in the process")
	}

	// A standalone server's command applies the cache server's defaults...
	if err := c.ApplyFeatureGates(); err != nil {
		t.Fatal(err)
	}
	if snapshots() {
		t.Errorf("ListFromCacheSnapshot is on after ApplyFeatureGates with the defaults")
	}
	if sizes() {
		t.Errorf("SizeBasedListCostEstimate is on after ApplyFeatureGates with the defaults")
	}
	// ...and --feature-gates over them.
	if err := complete(map[string]bool{string(features.ListFromCacheSnapshot): true}).ApplyFeatureGates(); err != nil {
		t.Fatal(err)
	}
	if !snapshots() {
		t.Errorf("--feature-gates=ListFromCacheSnapshot=true was not applied")
	}
	if sizes() {
		t.Errorf("--feature-gates=ListFromCacheSnapshot=true turned SizeBasedListCostEstimate on as well")
	}

	unknown := complete(map[string]bool{"NoSuchGate": true})
	if errs := unknown.Validate(); len(errs) == 0 {
		t.Errorf("Validate accepted an unknown gate")
	}
	if err := unknown.ApplyFeatureGates(); err == nil {
		t.Errorf("ApplyFeatureGates accepted an unknown gate")
	}
}
