package options

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// kcp's cache-server flags that mean something here reach the options.
func TestKcpFlagsReachOptions(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(),
		"--synthetic-delay=250ms",
		"--profiler-address=127.0.0.1:6060",
		"--authorization-always-allow-paths=/metrics,/debug/*",
		"--embedded-etcd-quota-backend-bytes=1073741824",
		"--embedded-etcd-wal-size-bytes=1048576",
		"--embedded-etcd-listen-metrics-urls=http://127.0.0.1:2381",
		"--embedded-etcd-force-new-cluster")
	if c.SyntheticDelay != 250*time.Millisecond || c.ProfilerAddress != "127.0.0.1:6060" {
		t.Errorf("synthetic delay %s, profiler address %q", c.SyntheticDelay, c.ProfilerAddress)
	}
	if !slices.Equal(c.Authorization.AlwaysAllowPaths, []string{"/metrics", "/debug/*"}) {
		t.Errorf("always-allow paths %v", c.Authorization.AlwaysAllowPaths)
	}
	e := c.EmbeddedEtcd
	if e.QuotaBackendBytes != 1<<30 || e.WALSegmentSizeBytes != 1<<20 || !slices.Equal(e.ListenMetricsURLs, []string{"http://127.0.0.1:2381"}) || !e.ForceNewCluster {
		t.Errorf("embedded etcd flags not applied: %+v", e)
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("valid flags reported %v", errs)
	}
	if len(c.IgnoredFlags) != 0 {
		t.Errorf("flags that take effect reported as ignored: %v", c.IgnoredFlags)
	}
}

// The upstream etcd flags kcp's cache-server registers that cannot mean
// anything here are accepted, reported for the start-up log, and do not
// reach the server: its watch cache stays on and no garbage collector
// semantics apply to deletions.
func TestKcpCompatibilityFlagsAreAcceptedAndReported(t *testing.T) {
	for _, tt := range []struct {
		arg, flag string
	}{
		{"--watch-cache=false", "--watch-cache"},
		{"--enable-garbage-collector=true", "--enable-garbage-collector"},
		{"--watch-cache-sizes=apiexports.apis.kcp.io#100", "--watch-cache-sizes"},
		{"--etcd-servers-overrides=/pods#http://127.0.0.1:4001", "--etcd-servers-overrides"},
		{"--storage-media-type=application/vnd.kubernetes.protobuf", "--storage-media-type"},
		{"--encryption-provider-config=/etc/kcp/encryption.yaml", "--encryption-provider-config"},
	} {
		c := parse(t, "--root-directory="+t.TempDir(), tt.arg)
		if errs := c.Validate(); len(errs) != 0 {
			t.Errorf("%s refused: %v", tt.arg, errs)
		}
		var names []string
		for _, f := range c.IgnoredFlags {
			names = append(names, f.Name)
			if f.Reason == "" {
				t.Errorf("%s reported without a reason", f.Name)
			}
		}
		if !slices.Equal(names, []string{tt.flag}) {
			t.Errorf("%s: ignored flags reported %v, want [%s]", tt.arg, names, tt.flag)
		}
		if !c.Etcd.EnableWatchCache || c.Etcd.EnableGarbageCollection {
			t.Errorf("%s reached the server: watch cache %t, garbage collection %t", tt.arg, c.Etcd.EnableWatchCache, c.Etcd.EnableGarbageCollection)
		}
	}
}

// --root-directory= (kcp-operator's argument) means no root directory, as
// in kcp's cache-server: no certificate directory (the serving certificate
// is given or lives in memory) and the embedded etcd in ./etcd-server unless
// --embedded-etcd-directory says otherwise.
func TestEmptyRootDirectoryMeansNone(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, "--root-directory=")
	if c.RootDirectory != "" || c.SecureServing.ServerCert.CertDirectory != "" {
		t.Errorf("root directory %q, certificate directory %q; want both empty", c.RootDirectory, c.SecureServing.ServerCert.CertDirectory)
	}
	if want := filepath.Join(wd, "etcd-server"); c.EmbeddedEtcd.Directory != want {
		t.Errorf("embedded etcd directory %q, want %q", c.EmbeddedEtcd.Directory, want)
	}
	if d := parse(t, "--root-directory=", "--embedded-etcd-directory=/var/etcd").EmbeddedEtcd.Directory; d != "/var/etcd" {
		t.Errorf("--embedded-etcd-directory=/var/etcd gave %q", d)
	}
	if d := parse(t).RootDirectory; d != filepath.Join(wd, DefaultRootDirectory) {
		t.Errorf("without the flag the root directory is %q, want ./%s", d, DefaultRootDirectory)
	}
}
