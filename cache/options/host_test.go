package options

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

func TestHostOptionsValidate(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*HostOptions)
		wantErrs  []string
		inProcess bool
	}{
		{name: "in-process cache", mutate: func(o *HostOptions) { o.RunCacheServer = true }, inProcess: true},
		{name: "remote cache by URL", mutate: func(o *HostOptions) { o.CacheURL = "https://cache:6443" }},
		{name: "serve one, push to another", mutate: func(o *HostOptions) { o.RunCacheServer = true; o.CacheKubeconfig = "/k" }},
		{name: "no cache at all", mutate: func(o *HostOptions) {}, wantErrs: []string{"no cache"}},
		{name: "two cache addresses", mutate: func(o *HostOptions) { o.CacheURL = "https://c"; o.CacheKubeconfig = "/k" }, wantErrs: []string{"both name the cache"}},
		{name: "relative URL", mutate: func(o *HostOptions) { o.CacheURL = "cache:6443" }, wantErrs: []string{"absolute"}},
		{name: "bad shard name", mutate: func(o *HostOptions) { o.RunCacheServer = true; o.ShardName = "Shard_1" }, wantErrs: []string{"--shard-name"}, inProcess: true},
		{name: "embedded etcd without a cache server", mutate: func(o *HostOptions) { o.CacheURL = "https://c"; o.CacheEmbeddedEtcdDirectory = "/d" }, wantErrs: []string{"needs --run-cache-server"}},
		{name: "etcd prefix without a cache server", mutate: func(o *HostOptions) { o.CacheURL = "https://c"; o.CacheEtcdPrefix = "/x" }, wantErrs: []string{"needs --run-cache-server"}},
		{name: "empty etcd prefix on the shared etcd", mutate: func(o *HostOptions) { o.RunCacheServer = true; o.CacheEtcdPrefix = "" }, wantErrs: []string{"must not be empty"}, inProcess: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewHostOptions()
			tt.mutate(o)
			c, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			errs := c.Validate()
			if len(errs) != len(tt.wantErrs) {
				t.Fatalf("got errors %v, want %d matching %v", errs, len(tt.wantErrs), tt.wantErrs)
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %q does not mention %q", errs[i], want)
				}
			}
			if c.InProcessCache != tt.inProcess {
				t.Errorf("InProcessCache = %v, want %v", c.InProcessCache, tt.inProcess)
			}
		})
	}
}

// kcp registers --shard-name and --cache-kubeconfig itself; the host
// options mount next to its flags without registering them again, and
// take kcp's values.
func TestHostOptionsComposeWithKcpFlags(t *testing.T) {
	fss := cliflag.NamedFlagSets{}
	kcp := fss.FlagSet("kcp")
	shardName := kcp.String("shard-name", "root", "kcp's")
	cacheKubeconfig := kcp.String("cache-kubeconfig", "", "kcp's")

	o := NewHostOptions().WithHostFlags(HostFlags{ShardName: shardName, CacheKubeconfig: cacheKubeconfig})
	o.AddFlags(&fss) // pflag panics on a name registered twice
	all := pflag.NewFlagSet("kcp start", pflag.ContinueOnError)
	for _, name := range fss.Order {
		all.AddFlagSet(fss.FlagSet(name))
	}
	if err := all.Parse([]string{"--shard-name=beta", "--cache-kubeconfig=/etc/kcp/cache.kubeconfig", "--run-cache-server"}); err != nil {
		t.Fatal(err)
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if c.ShardName != "beta" || c.CacheKubeconfig != "/etc/kcp/cache.kubeconfig" || !c.RunCacheServer || c.InProcessCache {
		t.Errorf("completed = %+v; want kcp's shard name and kubeconfig, our --run-cache-server, a remote cache", c.HostOptions)
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("Validate: %v", errs)
	}
}
