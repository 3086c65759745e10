package server

import (
	"context"
	"maps"
	"net"
	"reflect"
	"slices"
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kcp-cache/kcp-cache/cache/options"
)

// configState is what upstream's Complete would change in a Config built by
// NewConfig if New completed it in place, copied field by field.
type configState struct {
	openAPIInfo, openAPIV3Info            spec.Info
	openAPIResponses, openAPIV3Responses  []int
	openAPISecurity, openAPIV3Security    []map[string][]string
	externalAddress                       string
	discoveryAddressesSet, resolverSet    bool
	equivalentResourceRegistrySet         bool
	authenticator, admission, featureGate any
	enableDiscovery                       bool
	bootstrapCRDs                         int
}

func stateOf(c *Config) configState {
	g := c.Apiextensions.GenericConfig
	return configState{
		openAPIInfo:                   *g.OpenAPIConfig.Info,
		openAPIV3Info:                 *g.OpenAPIV3Config.Info,
		openAPIResponses:              slices.Sorted(maps.Keys(g.OpenAPIConfig.CommonResponses)),
		openAPIV3Responses:            slices.Sorted(maps.Keys(g.OpenAPIV3Config.CommonResponses)),
		openAPISecurity:               slices.Clone(g.OpenAPIConfig.DefaultSecurity),
		openAPIV3Security:             slices.Clone(g.OpenAPIV3Config.DefaultSecurity),
		externalAddress:               g.ExternalAddress,
		discoveryAddressesSet:         g.DiscoveryAddresses != nil,
		resolverSet:                   g.RequestInfoResolver != nil,
		equivalentResourceRegistrySet: g.EquivalentResourceRegistry != nil,
		authenticator:                 g.Authentication.Authenticator,
		admission:                     g.AdmissionControl,
		featureGate:                   g.FeatureGate,
		enableDiscovery:               g.EnableDiscovery,
		bootstrapCRDs:                 len(c.Extra.BootstrapCRDs),
	}
}

// Complete and New build on copies: a server built from a Config leaves the
// Config as it was, so that nothing upstream's completion writes is shared
// with the caller or with another server built from the same Config. New
// runs for real (an in-memory embedded etcd on free loopback ports).
func TestCompleteAndNewWriteNothingShared(t *testing.T) {
	opts := options.NewOptions()
	opts.RootDirectory = t.TempDir()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close() })
	opts.SecureServing.Listener, opts.SecureServing.BindPort = listener, listener.Addr().(*net.TCPAddr).Port
	opts.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	opts.EmbeddedEtcd.Storage = options.StorageMemory
	opts.EmbeddedEtcd.ClientPort, opts.EmbeddedEtcd.PeerPort = 0, 0
	opts.BootstrapTypes = nil
	completed, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if errs := completed.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	cfg, err := NewConfig(completed)
	if err != nil {
		t.Fatal(err)
	}
	before := stateOf(cfg)
	if before.openAPIInfo.Version != "" || before.openAPIV3Info.Version != "" {
		t.Fatalf("the OpenAPI configs already carry a version (%q, %q): the test could not see upstream's completion", before.openAPIInfo.Version, before.openAPIV3Info.Version)
	}

	completedCfg := cfg.Complete()
	if got := stateOf(cfg); !reflect.DeepEqual(got, before) {
		t.Fatalf("Complete changed the Config:\nbefore %+v\nafter  %+v", before, got)
	}
	srv, err := completedCfg.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if got := stateOf(cfg); !reflect.DeepEqual(got, before) {
		t.Fatalf("New changed the Config it was built from:\nbefore %+v\nafter  %+v", before, got)
	}
	if got := stateOf(&Config{Apiextensions: completedCfg.apiextensions, Extra: completedCfg.extra}); !reflect.DeepEqual(got, before) {
		t.Fatalf("New changed the completed configuration:\nbefore %+v\nafter  %+v", before, got)
	}
}
