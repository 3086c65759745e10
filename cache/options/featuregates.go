package options

import (
	"fmt"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// defaultFeatureGates are the cache server's defaults where they differ from
// upstream's; --feature-gates overrides them.
//
// ListFromCacheSnapshot keeps a copy-on-write snapshot of every watch cache
// for each event until etcd compacts (every 5 minutes), so that paginated
// and exact-resourceVersion lists can be served from memory. A cache server
// is written to in bursts (a shard's initial sync) and its consumers list
// with resourceVersion=0 or consistently, which never use the snapshots;
// measured with examples/bench, they cost about 1.3 KB per cached object,
// a third of the process's heap.
var defaultFeatureGates = map[string]bool{
	string(features.ListFromCacheSnapshot): false,
}

// applyFeatureGates sets the process's feature gates: the cache server's
// defaults, then what --feature-gates says.
func (o *Options) applyFeatureGates() error {
	gates := make(map[string]bool, len(defaultFeatureGates)+len(o.FeatureGates))
	for k, v := range defaultFeatureGates {
		gates[k] = v
	}
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for k, v := range o.FeatureGates {
		// Checked here: the gate keeps an unknown name it was handed and
		// refuses every later change because of it.
		if _, ok := known[featuregate.Feature(k)]; !ok {
			return fmt.Errorf("--feature-gates: unknown feature gate %q", k)
		}
		gates[k] = v
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return nil
}
