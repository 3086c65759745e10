package options

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
)

func parse(t *testing.T, args ...string) CompletedOptions {
	t.Helper()
	o := NewOptions()
	var fss cliflag.NamedFlagSets
	o.AddFlags(&fss)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	for _, s := range fss.FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFlagsReachOptions(t *testing.T) {
	root := t.TempDir()
	c := parse(t, "--root-directory="+root, "--embedded-etcd-directory=data", "--embedded-etcd-client-port=0",
		"--etcd-prefix=/mine", "--secure-port=7443")
	if !c.EmbeddedEtcd.Enabled {
		t.Error("no --etcd-servers should mean an embedded etcd")
	}
	if want := filepath.Join(root, "data"); c.EmbeddedEtcd.Directory != want {
		t.Errorf("embedded etcd directory = %q, want %q (relative to the root)", c.EmbeddedEtcd.Directory, want)
	}
	if c.EmbeddedEtcd.ClientPort != 0 || c.Etcd.StorageConfig.Prefix != "/mine" || c.SecureServing.BindPort != 7443 {
		t.Errorf("flags not applied: client port %d, prefix %q, port %d", c.EmbeddedEtcd.ClientPort, c.Etcd.StorageConfig.Prefix, c.SecureServing.BindPort)
	}
	if c.SecureServing.ServerCert.CertDirectory != root {
		t.Errorf("certificates go to %q, want the root directory", c.SecureServing.ServerCert.CertDirectory)
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("valid flags reported %v", errs)
	}
}

func TestExternalEtcdTurnsEmbeddedOff(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--etcd-servers=http://10.0.0.1:2379")
	if c.EmbeddedEtcd.Enabled {
		t.Error("--etcd-servers must disable the embedded etcd")
	}
}

func TestValidateRefusesWhatTheCacheCannotDo(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--embedded-etcd-client-port=5000", "--embedded-etcd-peer-port=5000"}, "must differ"},
		{[]string{"--embedded-etcd-peer-port=70000"}, "between 0 and 65535"},
		{[]string{"--client-ca-file=/does/not/exist"}, "--client-ca-file"},
		{[]string{"--token-auth-file=/does/not/exist"}, "--token-auth-file"},
		{[]string{"--storage=disk"}, "--storage must be"},
		{[]string{"--storage=memory", "--etcd-servers=http://10.0.0.1:2379"}, "contradicts --etcd-servers"},
		{[]string{"--shard-retention=-1s"}, "--shard-retention"},
		{[]string{"--type-retention=-1s"}, "--type-retention"},
		{[]string{"--removal-check-interval=0"}, "--removal-check-interval"},
		{[]string{"--embedded-etcd-maintenance-interval=0"}, "--embedded-etcd-maintenance-interval"},
		{[]string{"--synthetic-delay=-1s"}, "--synthetic-delay"},
		{[]string{"--authorization-always-allow-paths=/a*/b"}, "--authorization-always-allow-paths"},
		{[]string{"--embedded-etcd-listen-metrics-urls=127.0.0.1:2381"}, "--embedded-etcd-listen-metrics-urls"},
		{[]string{"--embedded-etcd-quota-backend-bytes=-1"}, "--embedded-etcd-quota-backend-bytes"},
		{[]string{"--embedded-etcd-wal-size-bytes=-1"}, "--embedded-etcd-wal-size-bytes"},
		{[]string{"--embedded-etcd-min-free-disk-bytes=-1"}, "--embedded-etcd-min-free-disk-bytes"},
		{[]string{"--max-requests-inflight=-1"}, "--max-requests-inflight"},
		{[]string{"--max-mutating-requests-inflight=-1"}, "--max-mutating-requests-inflight"},
		{[]string{"--max-list-objects-in-flight=-1"}, "--max-list-objects-in-flight"},
		{[]string{"--list-wait-timeout=0"}, "--list-wait-timeout"},
	} {
		c := parse(t, append([]string{"--root-directory=" + t.TempDir()}, tt.args...)...)
		errs := c.Validate()
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), tt.want)
		}
		if !found {
			t.Errorf("%v: errors %v do not mention %q", tt.args, errs, tt.want)
		}
	}
}

func TestSecurityFlagsReachOptions(t *testing.T) {
	root := t.TempDir()
	c := parse(t, "--root-directory="+root, "--client-ca-file=/ca.crt", "--token-auth-file=/tokens.csv",
		"--audit-log-path=/audit.log", "--audit-policy-file=/policy.yaml",
		"--etcd-cafile=/e/ca", "--etcd-certfile=/e/crt", "--etcd-keyfile=/e/key")
	if c.Authentication.ClientCert.ClientCA != "/ca.crt" || c.Authentication.TokenAuthFile != "/tokens.csv" {
		t.Errorf("authentication flags not applied: %+v", c.Authentication)
	}
	if c.Audit.LogOptions.Path != "/audit.log" || c.Audit.PolicyFile != "/policy.yaml" {
		t.Errorf("audit flags not applied: %q %q", c.Audit.LogOptions.Path, c.Audit.PolicyFile)
	}
	if tr := c.Etcd.StorageConfig.Transport; tr.TrustedCAFile != "/e/ca" || tr.CertFile != "/e/crt" || tr.KeyFile != "/e/key" {
		t.Errorf("etcd TLS flags not applied: %+v", tr)
	}
}

func TestRemovalAndStorageFlagsReachOptions(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--storage=memory", "--shard-retention=2h", "--type-retention=0",
		"--removal-check-interval=10s", "--embedded-etcd-maintenance-interval=30s")
	if c.EmbeddedEtcd.Storage != StorageMemory || c.EmbeddedEtcd.MaintenanceInterval != 30*time.Second {
		t.Errorf("storage flags not applied: %+v", c.EmbeddedEtcd)
	}
	if c.Removal.ShardRetention != 2*time.Hour || c.Removal.TypeRetention != 0 || c.Removal.CheckInterval != 10*time.Second {
		t.Errorf("removal flags not applied: %+v", c.Removal)
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("valid flags reported %v", errs)
	}
	d := parse(t, "--root-directory="+t.TempDir())
	if d.EmbeddedEtcd.Storage != StorageEtcd || d.Removal.ShardRetention != 24*time.Hour || d.Removal.TypeRetention != 24*time.Hour {
		t.Errorf("defaults: storage %q, shard retention %s, type retention %s", d.EmbeddedEtcd.Storage, d.Removal.ShardRetention, d.Removal.TypeRetention)
	}
}

func TestLimitFlagsReachOptions(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--max-requests-inflight=50", "--max-mutating-requests-inflight=0",
		"--max-list-objects-in-flight=10", "--list-wait-timeout=2s", "--return-memory-after-lists=false", "--memory-limit=3Gi",
		"--gogc=80", "--return-memory-at-rest=false")
	want := LimitOptions{MaxRequestsInFlight: 50, MaxMutatingRequestsInFlight: 0, MaxListObjectsInFlight: 10, ListWaitTimeout: 2 * time.Second, MemoryLimit: "3Gi", GCPercent: 80}
	if *c.Limits != want {
		t.Errorf("limit flags: got %+v, want %+v", *c.Limits, want)
	}
	if errs := c.Validate(); len(errs) != 0 {
		t.Errorf("valid flags reported %v", errs)
	}
	// Without a budget, the wait has nothing to bound.
	if errs := parse(t, "--root-directory="+t.TempDir(), "--max-list-objects-in-flight=0", "--list-wait-timeout=0").Validate(); len(errs) != 0 {
		t.Errorf("no budget and no wait reported %v", errs)
	}
	d := parse(t, "--root-directory="+t.TempDir())
	if *d.Limits != *NewLimitOptions() || d.Limits.MaxListObjectsInFlight != DefaultMaxListObjectsInFlight || !d.Limits.ReturnMemoryAfterLists || d.Limits.MemoryLimit != MemoryLimitAuto {
		t.Errorf("defaults: %+v", *d.Limits)
	}
	for _, bad := range []string{"--max-requests-inflight=many", "--list-wait-timeout=30", "--max-list-objects-in-flight=1.5"} {
		o := NewOptions()
		var fss cliflag.NamedFlagSets
		o.AddFlags(&fss)
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		for _, s := range fss.FlagSets {
			fs.AddFlagSet(s)
		}
		if err := fs.Parse([]string{bad}); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestEmbeddedEtcdStartTimeoutFlag(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--embedded-etcd-start-timeout=5s")
	if errs := c.Validate(); len(errs) > 0 || c.EmbeddedEtcd.StartTimeout != 5*time.Second {
		t.Errorf("--embedded-etcd-start-timeout=5s: %v, errors %v", c.EmbeddedEtcd.StartTimeout, errs)
	}
	if d := parse(t, "--root-directory="+t.TempDir()).EmbeddedEtcd.StartTimeout; d != DefaultEmbeddedEtcdStartTimeout {
		t.Errorf("default start timeout %s, want %s", d, DefaultEmbeddedEtcdStartTimeout)
	}
	if errs := parse(t, "--root-directory="+t.TempDir(), "--embedded-etcd-start-timeout=0s").Validate(); len(errs) == 0 {
		t.Error("--embedded-etcd-start-timeout=0s is accepted")
	}
}
