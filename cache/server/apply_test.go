package server

import (
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/options"
)

// The embedded etcd's options reach the member's configuration through
// their translator.
func TestApplyEmbeddedEtcdCarriesItsOptions(t *testing.T) {
	o := options.NewOptions()
	o.EmbeddedEtcd.Enabled = true
	o.EmbeddedEtcd.Directory = t.TempDir()
	o.EmbeddedEtcd.ClientPort, o.EmbeddedEtcd.PeerPort = 0, 0
	o.EmbeddedEtcd.StartTimeout = 7 * time.Second
	o.EmbeddedEtcd.QuotaBackendBytes = 1 << 30
	etcdOpts := *o.Etcd
	var derived derivedConfig
	if err := applyEmbeddedEtcd(o.EmbeddedEtcd, t.TempDir(), &etcdOpts, &derived); err != nil {
		t.Fatal(err)
	}
	ec := derived.embeddedEtcd
	if ec == nil || ec.StartTimeout != 7*time.Second || ec.QuotaBackendBytes != 1<<30 || ec.Directory != o.EmbeddedEtcd.Directory {
		t.Fatalf("embedded etcd configuration %+v", ec)
	}
	if got := etcdOpts.StorageConfig.Transport.ServerList; len(got) != 1 || got[0] != ec.ClientURL() {
		t.Errorf("storage reaches %v, want the member's %s", got, ec.ClientURL())
	}
}
