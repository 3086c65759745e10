package options

import (
	"fmt"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// defaultFeatureGates are a standalone cache server's defaults where they
// differ from upstream's; --feature-gates overrides them. A mounted cache
// keeps its host's: inside kcp, kcp's.
//
// ListFromCacheSnapshot keeps a copy-on-write snapshot of every watch cache
// for each event until etcd compacts (every 5 minutes), so that paginated
// and exact-resourceVersion lists can be served from memory. A cache server
// is written to in bursts (a shard's initial sync) and its consumers list
// with resourceVersion=0 or consistently, which never use the snapshots;
// measured with examples/bench, they cost about 1.3 KB per cached object,
// a third of the process's heap.
//
// SizeBasedListCostEstimate keeps the size of every stored object in a map
// by key, in each resource's etcd storage, for API Priority and Fairness to
// weigh LISTs by their bytes. This server cannot run API Priority and
// Fairness (options.LimitOptions says why) and its LIST budget counts
// objects, so the map serves only a metric of the estimated size
// (apiserver_resource_size_estimate_bytes); measured with examples/bench
// -phases scale, it costs about 150 bytes of heap per cached object.
// Without it a storage's Stats counts the keys in etcd instead.
var defaultFeatureGates = map[string]bool{
	string(features.ListFromCacheSnapshot):     false,
	string(features.SizeBasedListCostEstimate): false,
}

// validateFeatureGates refuses names the process's gate does not know: the
// gate keeps an unknown name it was handed and refuses every later change
// because of it.
func (o *Options) validateFeatureGates() []error {
	var errs []error
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for k := range o.FeatureGates {
		if _, ok := known[featuregate.Feature(k)]; !ok {
			errs = append(errs, fmt.Errorf("--feature-gates: unknown feature gate %q", k))
		}
	}
	return errs
}

// ApplyFeatureGates sets the feature gates of the process: the cache
// server's defaults, then what --feature-gates says. Upstream reads its gates
// process-wide (a watch cache reads ListFromCacheSnapshot when it is built,
// and at every list), so no gate can be one server's alone: only the command
// that owns the process of a standalone cache server calls this. A cache
// mounted in a host runs with the host's gates (NewMountedConfig refuses
// --feature-gates).
func (o CompletedOptions) ApplyFeatureGates() error {
	if errs := o.validateFeatureGates(); len(errs) > 0 {
		return errs[0]
	}
	gates := make(map[string]bool, len(defaultFeatureGates)+len(o.FeatureGates))
	for k, v := range defaultFeatureGates {
		gates[k] = v
	}
	for k, v := range o.FeatureGates {
		gates[k] = v
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return nil
}
