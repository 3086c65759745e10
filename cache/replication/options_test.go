package replication

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestOptionsFlagsAndApplyTo(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--replication-workers=4", "--replication-extra-resources=workspacetypes.v1alpha1.tenancy.kcp.io,apiexports.v1alpha2.apis.kcp.io,configmaps.v1.", "--replication-system-clusters"}); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatalf("Validate: %v", errs)
	}
	cfg := &Config{}
	if err := o.ApplyTo(cfg); err != nil {
		t.Fatal(err)
	}
	var got []schema.GroupVersionResource
	for _, r := range cfg.Resources {
		got = append(got, r.GVR)
	}
	var want []schema.GroupVersionResource
	for _, r := range DefaultResources() {
		want = append(want, r.GVR)
	}
	// workspacetypes and apiexports are defaults already; configmaps is added once.
	want = append(want, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if len(got) != len(want) {
		t.Fatalf("resources = %v, want %v (defaults first, duplicates once)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("resources = %v, want %v", got, want)
		}
	}
	if o.Workers != 4 || !cfg.ReplicateSystemClusters {
		t.Errorf("workers = %d, system clusters = %v", o.Workers, cfg.ReplicateSystemClusters)
	}
}

// A kcp main shard pushes clustercachedresources where a v0.32 shard pushes
// cachedresources (kcp's pkg/reconciler/cache/replication in both trees).
func TestOptionsKcpReleaseSelectsTheDefaults(t *testing.T) {
	cachedResources := schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"}
	clusterCachedResources := schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "clustercachedresources"}
	for _, tc := range []struct {
		flags      []string
		has, lacks schema.GroupVersionResource
	}{
		{nil, cachedResources, clusterCachedResources},
		{[]string{"--replication-kcp-release=v0.32"}, cachedResources, clusterCachedResources},
		{[]string{"--replication-kcp-release=main"}, clusterCachedResources, cachedResources},
	} {
		o := NewOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.flags); err != nil {
			t.Fatal(err)
		}
		if errs := o.Validate(); len(errs) > 0 {
			t.Fatalf("%v: Validate: %v", tc.flags, errs)
		}
		cfg := &Config{}
		if err := o.ApplyTo(cfg); err != nil {
			t.Fatal(err)
		}
		have := map[schema.GroupVersionResource]bool{}
		for _, r := range cfg.Resources {
			have[r.GVR] = true
		}
		if !have[tc.has] || have[tc.lacks] || len(cfg.Resources) != len(DefaultResources()) {
			t.Errorf("%v: %d resources, %s %t, %s %t; want the first, not the second, as many as the v0.32 defaults",
				tc.flags, len(cfg.Resources), tc.has.Resource, have[tc.has], tc.lacks.Resource, have[tc.lacks])
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []*Options{
		{Workers: 0, KcpRelease: "v0.32"},
		{Workers: 1, KcpRelease: "v0.32", ExtraResources: []string{"widgets"}},
		{Workers: 1, KcpRelease: "v0.32", ExtraResources: []string{".v1.g"}},
		{Workers: 1, KcpRelease: "v0.31"},
	} {
		if errs := o.Validate(); len(errs) == 0 {
			t.Errorf("%+v: Validate found nothing", o)
		}
	}
}
