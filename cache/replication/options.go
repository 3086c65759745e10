package replication

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Options are the command-line settings of the replication controller. They
// cover what an operator changes; filters and sources are set in code, on the
// Config that ApplyTo fills.
type Options struct {
	// Workers is how many keys are reconciled at once; pass it to Run.
	Workers int
	// ExtraResources are replicated in addition to DefaultResources, each as
	// "resource.version.group" (for example "workspacetypes.v1alpha1.tenancy.kcp.io").
	ExtraResources []string
	// ReplicateSystemClusters is Config.ReplicateSystemClusters.
	ReplicateSystemClusters bool
	// KcpRelease is the kcp release line of the shard, which selects the
	// default resources (DefaultResourcesOf).
	KcpRelease string
}

// NewOptions returns the defaults: two workers, the default resources, no
// system clusters.
func NewOptions() *Options {
	return &Options{Workers: DefaultWorkers, KcpRelease: string(kcpcache.DefaultKcpRelease)}
}

// AddFlags adds the options' flags to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Workers, "replication-workers", o.Workers, "Number of objects the replication controller reconciles at once.")
	fs.StringSliceVar(&o.ExtraResources, "replication-extra-resources", o.ExtraResources,
		"Resources replicated in addition to the kcp types kcp replicates, as resource.version.group.")
	fs.BoolVar(&o.ReplicateSystemClusters, "replication-system-clusters", o.ReplicateSystemClusters,
		"Also replicate objects in logical clusters named system:*.")
	fs.StringVar(&o.KcpRelease, "replication-kcp-release", o.KcpRelease,
		"The kcp release line of this shard, which selects the kcp types replicated by default: "+joinReleases()+".")
}

func joinReleases() string {
	var names []string
	for _, r := range kcpcache.KcpReleases() {
		names = append(names, string(r))
	}
	return strings.Join(names, ", ")
}

// Validate reports every invalid option.
func (o *Options) Validate() []error {
	var errs []error
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--replication-workers must be at least 1, got %d", o.Workers))
	}
	for _, r := range o.ExtraResources {
		if _, err := parseResource(r); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := kcpcache.KcpTypesOf(kcpcache.KcpRelease(o.KcpRelease)); err != nil {
		errs = append(errs, fmt.Errorf("--replication-kcp-release: %w", err))
	}
	return errs
}

// ApplyTo sets cfg's resources and system-cluster switch. Resources already
// in cfg (with their filters) are kept; the defaults of the release line are
// added when cfg has none, and the extra resources when not already there.
func (o *Options) ApplyTo(cfg *Config) error {
	resources := cfg.Resources
	if resources == nil {
		var err error
		if resources, err = DefaultResourcesOf(kcpcache.KcpRelease(o.KcpRelease)); err != nil {
			return err
		}
	}
	have := map[schema.GroupVersionResource]bool{}
	for _, r := range resources {
		have[r.GVR] = true
	}
	for _, s := range o.ExtraResources {
		gvr, err := parseResource(s)
		if err != nil {
			return err
		}
		if !have[gvr] {
			resources = append(resources, Resource{GVR: gvr})
			have[gvr] = true
		}
	}
	cfg.Resources = resources
	cfg.ReplicateSystemClusters = o.ReplicateSystemClusters
	return nil
}

// parseResource parses "resource.version.group"; the group may be empty
// ("configmaps.v1.") for the core group.
func parseResource(s string) (schema.GroupVersionResource, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return schema.GroupVersionResource{}, fmt.Errorf("resource %q must have the form resource.version.group", s)
	}
	return schema.GroupVersionResource{Resource: parts[0], Version: parts[1], Group: parts[2]}, nil
}
