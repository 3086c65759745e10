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

// The disk guard applies to an embedded etcd on disk only: an in-memory
// member or an external etcd has no directory of this server's to watch.
func TestApplyDiskGuardOnlyForAnEmbeddedEtcdOnDisk(t *testing.T) {
	for _, tc := range []struct {
		name     string
		enabled  bool
		storage  string
		minFree  int64
		wantFree int64
	}{
		{"on disk", true, options.StorageEtcd, 1 << 30, 1 << 30},
		{"on disk, off", true, options.StorageEtcd, 0, 0},
		{"in memory", true, options.StorageMemory, 1 << 30, 0},
		{"external etcd", false, options.StorageEtcd, 1 << 30, 0},
	} {
		o := options.NewEmbeddedEtcdOptions()
		o.Enabled, o.Storage, o.MinFreeDiskBytes = tc.enabled, tc.storage, tc.minFree
		var extra ExtraConfig
		applyDiskGuard(o, &extra)
		if extra.MinFreeDiskBytes != tc.wantFree {
			t.Errorf("%s: MinFreeDiskBytes %d, want %d", tc.name, extra.MinFreeDiskBytes, tc.wantFree)
		}
	}
	if got := options.NewEmbeddedEtcdOptions().MinFreeDiskBytes; got != 256<<20 {
		t.Errorf("default --embedded-etcd-min-free-disk-bytes %d, want 256 MiB", got)
	}
}
