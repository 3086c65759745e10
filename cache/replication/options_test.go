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

func TestOptionsValidate(t *testing.T) {
	for _, o := range []*Options{
		{Workers: 0},
		{Workers: 1, ExtraResources: []string{"widgets"}},
		{Workers: 1, ExtraResources: []string{".v1.g"}},
	} {
		if errs := o.Validate(); len(errs) == 0 {
			t.Errorf("%+v: Validate found nothing", o)
		}
	}
}
