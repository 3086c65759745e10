//go:build unix

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// The user a container image without a USER of its own would not run as,
// and that this test runs the binary as when the test runs as root (root
// ignores permission bits, so only another user shows what a read-only file
// system refuses): nobody.
const unprivileged = 65534

// kcp-operator's CacheServer runs kcp's image with command /cache-server and
// these arguments (kcp-operator internal/resources/compiledcacheserver/
// deployment.go getArgs; the mount paths are its getCertificateMountPath and
// getCAMountPath), on a read-only root file system with an emptyDir at
// /var/etcd, HTTPS probes on /readyz and /livez, and one client certificate
// for every shard, CN=cache-client O=system:masters (its
// internal/resources/cacheserver/certificates.go). Here the file system is
// below base, and, since the machine is shared and not a pod's own network
// namespace, the ports are free ones on loopback (appended; the operator
// leaves them at their defaults, 6443, 2379 and 2380).
func operatorArgs(base string, etcd *cachetest.EtcdCluster, secure, etcdClient, etcdPeer int) []string {
	args := []string{
		"--tls-cert-file=" + base + "/etc/cache-server/tls/server/tls.crt",
		"--tls-private-key-file=" + base + "/etc/cache-server/tls/server/tls.key",
		"--root-directory=",
		"--client-ca-file=" + base + "/etc/cache-server/tls/ca/root/tls.crt",
	}
	if etcd == nil {
		args = append(args, "--embedded-etcd-directory="+base+"/var/etcd")
	} else {
		args = append(args,
			"--etcd-servers="+etcd.Endpoints()[0],
			"--etcd-prefix=/kcp-operator-cache",
			"--etcd-cafile="+base+"/etc/cache-server/etcd/ca.crt",
			"--etcd-certfile="+base+"/etc/cache-server/etcd/tls.crt",
			"--etcd-keyfile="+base+"/etc/cache-server/etcd/tls.key",
		)
	}
	args = append(args, "-v=2")
	args = append(args, "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", secure))
	if etcd == nil {
		args = append(args, fmt.Sprintf("--embedded-etcd-client-port=%d", etcdClient), fmt.Sprintf("--embedded-etcd-peer-port=%d", etcdPeer))
	}
	return args
}

// The binary runs as kcp-operator runs kcp's cache: the operator's
// arguments, an empty --root-directory, nothing writable but the etcd
// directory (nothing at all with an external etcd), not root, and the one
// shared system:masters certificate writing every shard's partition. It
// becomes ready, serves, and writes nowhere else.
func TestKcpOperatorDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (kcp-operator's deployment of the cache, several processes): skipped with -short")
	}
	for _, external := range []bool{false, true} {
		name := "embedded etcd"
		if external {
			name = "external etcd"
		}
		t.Run(name, func(t *testing.T) {
			testKcpOperatorDeployment(t, external)
		})
	}
}

func testKcpOperatorDeployment(t *testing.T, external bool) {
	base, err := os.MkdirTemp("", "kcp-operator-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
		_ = os.RemoveAll(base)
	})

	// The secrets the operator mounts: the server certificate, the root
	// CA that signs client certificates, and (external etcd) etcd's client
	// certificate. Kubernetes mounts secrets readable by the container.
	servingCA, err := pki.NewCA("kcp-operator-serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	servingCert, servingKey, err := servingCA.IssueServing("cache-server", []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := pki.NewCA("kcp-operator-root-ca")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"etc/cache-server/tls/server/tls.crt":  servingCert,
		"etc/cache-server/tls/server/tls.key":  servingKey,
		"etc/cache-server/tls/ca/root/tls.crt": clientCA.CertPEM,
	}
	var etcd *cachetest.EtcdCluster
	if external {
		etcd = cachetest.StartEtcdCluster(t, 1)
		var o options.Options
		o.Etcd = options.NewOptions().Etcd
		etcd.Flags(&o)
		tr := o.Etcd.StorageConfig.Transport
		for dst, src := range map[string]string{"ca.crt": tr.TrustedCAFile, "tls.crt": tr.CertFile, "tls.key": tr.KeyFile} {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			files["etc/cache-server/etcd/"+dst] = data
		}
	}
	for path, data := range files {
		if err := os.MkdirAll(filepath.Join(base, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, path), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The working directory (the image's /), and the emptyDir at /var/etcd
	// with an embedded etcd: the only directory anyone may write.
	workDir := filepath.Join(base, "work")
	etcdDir := filepath.Join(base, "var", "etcd")
	for _, d := range []string{workDir, etcdDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	uid := os.Getuid()
	var credential *syscall.Credential
	if uid == 0 {
		credential = &syscall.Credential{Uid: unprivileged, Gid: unprivileged}
		uid = unprivileged
		if err := os.Chown(etcdDir, unprivileged, unprivileged); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		// Not root: permission bits hold for this user, so everything but
		// the etcd directory is made read-only.
		if err := filepath.Walk(base, func(p string, info os.FileInfo, err error) error {
			if err != nil || p == etcdDir {
				return err
			}
			if info.IsDir() {
				return os.Chmod(p, 0o555)
			}
			return os.Chmod(p, 0o444)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if external {
		// Nothing is writable with an external etcd: the emptyDir is not
		// mounted then.
		if err := os.Chmod(etcdDir, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	secure, etcdClient, etcdPeer := reserve(t), reserve(t), reserve(t)
	cacheServerBinary(t) // built before the clock starts
	before, ownedBefore := tree(t, base), ownedBy(t, uid)

	started := time.Now()
	p := startBinary(t, workDir, operatorArgs(base, etcd, secure, etcdClient, etcdPeer), func(cmd *exec.Cmd) {
		// A read-only root file system has no writable temporary
		// directory or home either.
		cmd.Env = append(os.Environ(), "HOME="+workDir, "TMPDIR="+workDir)
		if credential != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential}
		}
	})

	// What the operator's probes and a shard see: the serving certificate
	// of the operator's CA, and the one shared client certificate.
	certPEM, keyPEM, err := clientCA.IssueClient("cache-client", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	shared := &rest.Config{
		Host:            fmt.Sprintf("https://127.0.0.1:%d", secure),
		TLSClientConfig: rest.TLSClientConfig{CAData: servingCA.CertPEM, CertData: certPEM, KeyData: keyPEM},
	}
	ctx := p.untilExit(t)
	probe := rest.AnonymousClientConfig(shared)
	for _, path := range []string{"/readyz", "/livez"} {
		if err := cachetest.WaitForPath(ctx, probe, path); err != nil {
			t.Fatalf("the operator's probe: %v", err)
		}
	}
	t.Logf("ready (/readyz and /livez 200) %s after the start", time.Since(started).Round(10*time.Millisecond))
	checkShardsWriteAndRead(t, ctx, shared)

	if err := p.stop(); err != nil {
		t.Fatalf("shutdown on SIGTERM: %v", err)
	}
	after := tree(t, base)
	var outsideEtcd, inEtcd []string
	for _, e := range after {
		if e == "var/etcd" || !isBelow(e, "var/etcd") {
			outsideEtcd = append(outsideEtcd, e)
		} else {
			inEtcd = append(inEtcd, e)
		}
	}
	var beforeOutside []string
	for _, e := range before {
		if e == "var/etcd" || !isBelow(e, "var/etcd") {
			beforeOutside = append(beforeOutside, e)
		}
	}
	if !slices.Equal(beforeOutside, outsideEtcd) {
		t.Errorf("the server wrote outside the etcd directory:\nbefore %v\nafter  %v", beforeOutside, outsideEtcd)
	}
	if external && len(inEtcd) != 0 {
		t.Errorf("with an external etcd the server wrote into the etcd directory: %v", inEtcd)
	}
	if !external && !slices.Contains(inEtcd, "var/etcd/member") {
		t.Errorf("the embedded etcd's data is not in the etcd directory: %v", inEtcd)
	}
	if credential != nil {
		// Only the server runs as this user: anything of its in the
		// machine's writable directories was written by the server.
		if ownedAfter := ownedBy(t, uid); !slices.Equal(ownedBefore, ownedAfter) {
			t.Errorf("the server wrote to shared temporary directories: before %v, after %v", ownedBefore, ownedAfter)
		}
	} else {
		t.Logf("not root: shared temporary directories not checked (this user's other processes write there too)")
	}
}

// kcp's sharded-test-server (the environment of kcp's e2e tests) starts its
// cache with these arguments (kcp cmd/sharded-test-server/cache.go
// startCacheServer, embedded etcd), waits for <root>/apiserver.crt, and
// writes the shards' kubeconfig itself: server https://localhost:8012, the
// CA from apiserver.crt, a client certificate CN=cache-client
// O=system:masters from its client CA. Ports here are free ones instead of
// 8012, 8010 and 8011; the delay is non-zero so that it shows.
func TestKcpShardedTestServer(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (kcp's sharded test environment's cache start, several processes): skipped with -short")
	}
	const delay = 250 * time.Millisecond
	work := t.TempDir()
	root := filepath.Join(work, ".kcp-cache")
	clientCA, err := pki.NewCA("sharded-test-server-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(work, ".kcp", "client-ca.crt")
	if err := pki.WriteFile(caFile, clientCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	secure, etcdClient, etcdPeer := reserve(t), reserve(t), reserve(t)
	cacheServerBinary(t) // built before the clock starts
	started := time.Now()
	p := startBinary(t, work, []string{
		"--root-directory=" + root,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", secure),
		"--synthetic-delay=" + delay.String(),
		"--client-ca-file=" + caFile,
		fmt.Sprintf("--embedded-etcd-client-port=%d", etcdClient),
		fmt.Sprintf("--embedded-etcd-peer-port=%d", etcdPeer),
	}, nil)
	ctx := p.untilExit(t)

	var servingCert []byte
	if err := cachetest.Poll(ctx, func(context.Context) error {
		servingCert, err = os.ReadFile(filepath.Join(root, "apiserver.crt"))
		return err
	}); err != nil {
		t.Fatalf("sharded-test-server waits for <root>/apiserver.crt: %v", err)
	}
	certPEM, keyPEM, err := clientCA.IssueClient("cache-client", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{
		Host:            fmt.Sprintf("https://localhost:%d", secure),
		TLSClientConfig: rest.TLSClientConfig{CAData: servingCert, CertData: certPEM, KeyData: keyPEM},
	}
	if err := cachetest.WaitForPath(ctx, cfg, "/readyz"); err != nil {
		t.Fatal(err)
	}
	t.Logf("ready %s after the start (with --synthetic-delay=%s on every request)", time.Since(started).Round(10*time.Millisecond), delay)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	resp, err := client.Get(cfg.Host + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if took := time.Since(asked); resp.StatusCode != http.StatusOK || took < delay {
		t.Errorf("/livez: %d after %s; want 200 after at least --synthetic-delay=%s", resp.StatusCode, took, delay)
	}
	checkShardsWriteAndRead(t, ctx, cfg)
}

var apiExports = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}

// checkShardsWriteAndRead pushes an APIExport into the partitions of two
// shards with cfg's identity (the one certificate kcp-operator and
// sharded-test-server give every shard), reads each back by name, and finds
// both in a wildcard list, as kcp's informers read them.
func checkShardsWriteAndRead(t *testing.T, ctx context.Context, cfg *rest.Config) {
	t.Helper()
	partitions := []kcpcache.Scope{{Shard: "root", Cluster: "root"}, {Shard: "shard-1", Cluster: "2x9j3n5h"}}
	for _, s := range partitions {
		export := &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": apiExports.GroupVersion().String(),
			"kind":       "APIExport",
			"metadata":   map[string]interface{}{"name": "export-of-" + s.Shard},
		}}
		c := partitionClient(t, cfg, s)
		if _, err := c.Create(ctx, export, metav1.CreateOptions{}); err != nil {
			t.Fatalf("shard %s writes its partition with the shared certificate: %v", s.Shard, err)
		}
		got, err := c.Get(ctx, export.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading back %s: %v", export.GetName(), err)
		}
		if a := got.GetAnnotations(); a[kcpcache.AnnotationShard] != s.Shard || a[kcpcache.AnnotationCluster] != s.Cluster {
			t.Errorf("%s read back with annotations %v, want shard %s cluster %s", export.GetName(), a, s.Shard, s.Cluster)
		}
	}
	list, err := partitionClient(t, cfg, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range list.Items {
		names = append(names, u.GetAnnotations()[kcpcache.AnnotationShard]+"/"+u.GetName())
	}
	slices.Sort(names)
	if want := []string{"root/export-of-root", "shard-1/export-of-shard-1"}; !slices.Equal(names, want) {
		t.Errorf("*/* lists %v, want %v", names, want)
	}
}

func partitionClient(t *testing.T, cfg *rest.Config, s kcpcache.Scope) dynamic.ResourceInterface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host += kcpcache.ScopedPathPrefix(s)
	d, err := dynamic.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(apiExports)
}

func reserve(t *testing.T) int {
	t.Helper()
	port, err := ports.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// isBelow reports whether the "/"-separated relative path p is inside dir.
func isBelow(p, dir string) bool {
	return len(p) > len(dir) && p[:len(dir)+1] == dir+"/"
}
