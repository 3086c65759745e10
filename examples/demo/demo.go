package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/examples/internal/run"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

var apiResourceSchemas = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}

const (
	exportCluster = "payments" // lives on shard alpha
	bindCluster   = "shop"     // lives on shard beta
	exportName    = "payments"
)

type demo struct {
	root    string
	logPath string
	step    int
	cache   *cachetest.Server
	shards  map[string]*run.Shard
	regions []*region
}

// newDemo sends every server's log (klog and etcd's) to servers.log, so that
// standard output shows only the steps.
func newDemo(root string) (*demo, error) {
	logPath := filepath.Join(root, "servers.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Dup3(int(f.Fd()), int(os.Stderr.Fd()), 0); err != nil {
		return nil, fmt.Errorf("redirecting server logs: %w", err)
	}
	return &demo{root: root, logPath: logPath, shards: map[string]*run.Shard{}}, nil
}

func (d *demo) say(format string, args ...interface{}) {
	d.step++
	fmt.Printf("\n[%d] %s\n", d.step, fmt.Sprintf(format, args...))
}

func detail(format string, args ...interface{}) {
	fmt.Printf("    %s\n", fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	d.say("Starting a cache server with an embedded etcd; it trusts a client CA that issues one identity per shard")
	ids, err := run.NewIdentities(filepath.Join(d.root, "identities"))
	if err != nil {
		return err
	}
	cache, err := run.Cache(ctx, filepath.Join(d.root, "cache"), 0, ids.TrustedBy)
	d.cache = cache
	if err != nil {
		return err
	}
	detail("serving %s/services/cache/shards/{shard}/clusters/{cluster}/...", cache.Config().Host)
	detail("admin kubeconfig: %s (the demo reads with it; no shard gets it)", cache.Kubeconfig())
	detail("client CA (--client-ca-file): %s", ids.CAFile)

	d.say("Starting shards alpha and beta; each pushes its APIExports and APIResourceSchemas into the cache with its own identity")
	kubeconfigs := map[string]string{}
	for _, name := range []string{"alpha", "beta"} {
		if kubeconfigs[name], err = ids.ShardKubeconfig(cache, name); err != nil {
			return err
		}
		detail("shard %-5s authenticates as %s (client certificate in %s)", name, kcpcache.ShardUser(name), kubeconfigs[name])
		s, err := run.StartShard(ctx, filepath.Join(d.root, name), name, func(o *shardserver.Options) {
			o.Cache.CacheKubeconfig = kubeconfigs[name]
			if name == "alpha" {
				o.UserRead.Workspaces = []string{exportCluster}
			}
		})
		d.shards[name] = s
		if err != nil {
			return fmt.Errorf("shard %s: %w", name, err)
		}
		detail("shard %-5s serves %s/clusters/{cluster}/...", name, s.Config.Host)
	}

	alpha := scoped(d.shards["alpha"].Config, "/clusters/"+exportCluster)
	d.say("Creating APIResourceSchema and APIExport %q in logical cluster %q on shard alpha", exportName, exportCluster)
	schemaObj := object(apiResourceSchemas, "APIResourceSchema", "v1.charges.payments.example", map[string]interface{}{"group": "payments.example", "names": map[string]interface{}{"plural": "charges", "kind": "Charge"}})
	if _, err := alpha.Resource(apiResourceSchemas).Create(ctx, schemaObj, metav1.CreateOptions{}); err != nil {
		return err
	}
	export, err := alpha.Resource(shardserver.APIExports).Create(ctx, object(shardserver.APIExports, "APIExport", exportName, map[string]interface{}{"latestResourceSchemas": []interface{}{"v1.charges.payments.example"}}), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	detail("APIExport %s|%s uid=%s", exportCluster, exportName, export.GetUID())

	d.say("Waiting for the cache to hold alpha's copies")
	everywhere := scoped(cache.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "*", Cluster: "*"}))
	if err := cachetest.Poll(ctx, func(context.Context) error { return expectCopies(ctx, everywhere, 1, 1) }); err != nil {
		return err
	}
	if err := printCopies(ctx, everywhere); err != nil {
		return err
	}
	heartbeats, err := d.watchHeartbeats(ctx, cache.Config())
	if err != nil {
		return err
	}
	defer heartbeats.Shutdown()
	if err := cachetest.Poll(ctx, func(context.Context) error {
		if f := heartbeats.Shard("alpha"); !f.Converged || !f.Confirmed() || f.Objects != 2 {
			return fmt.Errorf("alpha's heartbeat: converged=%t confirmed=%t copies=%d", f.Converged, f.Confirmed(), f.Objects)
		}
		return nil
	}); err != nil {
		return err
	}
	detail("alpha's heartbeat: its partition is converged and confirmed, 2 copies")

	d.say("Shard beta's identity may read alpha's partition but not write it")
	if err := d.tryOverwrite(ctx, kubeconfigs["beta"]); err != nil {
		return err
	}

	beta := scoped(d.shards["beta"].Config, "/clusters/"+bindCluster)
	d.say("Creating APIBinding %q in logical cluster %q on shard beta, pointing at APIExport %s|%s", "payments", bindCluster, exportCluster, exportName)
	if err := d.bindAndWait(ctx, beta, "payments", string(export.GetUID())); err != nil {
		return err
	}

	d.say("Marking alpha's workspace %q for users: alpha pushes its LogicalCluster and RBAC into its user-read partition %s", exportCluster, kcpcache.UserReadPartition("alpha"))
	if err := d.prepareUserRead(ctx); err != nil {
		return fmt.Errorf("user-read partition: %w", err)
	}
	detail("%s holds the workspace's RBAC, and its heartbeat says converged", kcpcache.UserReadPartition("alpha"))

	d.say("Stopping shard alpha")
	if err := d.shards["alpha"].Stop(); err != nil {
		return fmt.Errorf("stopping shard alpha: %w", err)
	}
	if _, err := run.Get(ctx, d.shards["alpha"].Config, "/readyz"); err == nil {
		return fmt.Errorf("shard alpha still answers after stopping")
	}
	detail("shard alpha no longer answers")

	d.say("The cache still serves alpha's copies")
	if err := printCopies(ctx, everywhere); err != nil {
		return err
	}

	d.say("A user reads alpha's workspace %q through kcp's read-only fallback: served from the cache with a Warning, decided as alpha's RBAC decides, writes refused", exportCluster)
	if err := d.readAsUser(ctx); err != nil {
		return fmt.Errorf("reading as a user: %w", err)
	}

	d.say("How fresh each shard's partition is: alpha's heartbeat ages, beta's is renewed")
	if err := printFreshness(ctx, heartbeats); err != nil {
		return err
	}

	d.say("Creating APIBinding %q on shard beta while alpha is down", "payments-again")
	if err := d.bindAndWait(ctx, beta, "payments-again", string(export.GetUID())); err != nil {
		return err
	}
	// Beta's own use of the cache may be briefly degraded while it pushes
	// the new binding's dependencies; it must become healthy, not stay so.
	betaAdmin := d.shards["beta"].Config
	for _, path := range []string{"/readyz", "/readyz/cache-replication"} {
		if err := cachetest.WaitForPath(ctx, betaAdmin, path); err != nil {
			return fmt.Errorf("shard beta: %w", err)
		}
	}
	detail("shard beta: /readyz 200, /readyz/cache-replication 200 (its own use of the cache is healthy)")

	return d.runRegions(ctx)
}

// watchHeartbeats reads the shards' heartbeats as a consumer would.
func (d *demo) watchHeartbeats(ctx context.Context, cfg *rest.Config) (*client.Heartbeats, error) {
	c, err := client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	heartbeats := client.NewHeartbeats(c)
	heartbeats.Start(ctx)
	if !heartbeats.WaitForCacheSync(ctx) {
		heartbeats.Shutdown()
		return nil, fmt.Errorf("heartbeats did not sync")
	}
	return heartbeats, nil
}

// printFreshness waits until alpha has missed a renewal, so that its age
// visibly exceeds beta's, and prints every shard's freshness.
func printFreshness(ctx context.Context, heartbeats *client.Heartbeats) error {
	err := cachetest.Poll(ctx, func(context.Context) error {
		alpha, beta := heartbeats.Shard("alpha"), heartbeats.Shard("beta")
		if !alpha.Known || !beta.Known || alpha.Age < 2*beta.Age || alpha.Age < 6*time.Second {
			return fmt.Errorf("alpha %v, beta %v", alpha.Age, beta.Age)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range heartbeats.Shards() {
		detail("shard %-5s last heartbeat %4.1fs ago (lease %s, expired %-5t) converged=%t confirmed=%t copies=%d",
			f.Shard, f.Age.Seconds(), f.LeaseDuration, f.Expired(), f.Converged, f.Confirmed(), f.Objects)
	}
	detail("alpha's copies are its state as of its last heartbeat; operators see the same with")
	detail("  kubectl get shardheartbeats --server <cache>/services/cache/shards/*/clusters/%s", kcpcache.HeartbeatCluster)
	return nil
}

// tryOverwrite reads alpha's export with beta's cache identity, then tries
// to overwrite it and expects the cache to refuse.
func (d *demo) tryOverwrite(ctx context.Context, betaKubeconfig string) error {
	cfg, err := client.ConfigFromKubeconfig(betaKubeconfig, "")
	if err != nil {
		return err
	}
	alphas := scoped(cfg, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "alpha", Cluster: exportCluster})).Resource(shardserver.APIExports)
	got, err := alphas.Get(ctx, exportName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("beta reading alpha's copy: %w", err)
	}
	detail("beta reads shards/alpha/clusters/%s apiexports %s: ok", exportCluster, got.GetName())
	got.SetLabels(map[string]string{"overwritten-by": "beta"})
	_, err = alphas.Update(ctx, got, metav1.UpdateOptions{})
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("beta overwriting alpha's copy: got %v, want 403 Forbidden", err)
	}
	detail("beta updates it: 403 %v", err)
	return nil
}

// bindAndWait creates a binding and waits until beta resolved it through
// the cache to the export with uid.
func (d *demo) bindAndWait(ctx context.Context, beta dynamic.Interface, name, uid string) error {
	binding := object(shardserver.APIBindings, "APIBinding", name, map[string]interface{}{
		"reference": map[string]interface{}{"export": map[string]interface{}{"cluster": exportCluster, "name": exportName}},
	})
	if _, err := beta.Resource(shardserver.APIBindings).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return err
	}
	var status map[string]interface{}
	err := cachetest.Poll(ctx, func(context.Context) error {
		got, err := beta.Resource(shardserver.APIBindings).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		status, _, _ = unstructured.NestedMap(got.Object, "status")
		if status["phase"] != "Bound" {
			return fmt.Errorf("APIBinding %s status %v", name, status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	shard, _, _ := unstructured.NestedString(status, "export", "shard")
	gotUID, _, _ := unstructured.NestedString(status, "export", "uid")
	detail("APIBinding %s: phase=%v source=%v export shard=%s uid=%s", name, status["phase"], status["source"], shard, gotUID)
	if status["source"] != "cache" || shard != "alpha" || gotUID != uid {
		return fmt.Errorf("expected the export of shard alpha (uid %s) through the cache, got %v", uid, status)
	}
	return nil
}

func expectCopies(ctx context.Context, c dynamic.Interface, exports, schemas int) error {
	for gvr, want := range map[schema.GroupVersionResource]int{shardserver.APIExports: exports, apiResourceSchemas: schemas} {
		list, err := c.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != want {
			return fmt.Errorf("the cache holds %d %s, want %d", len(list.Items), gvr.Resource, want)
		}
	}
	return nil
}

func printCopies(ctx context.Context, c dynamic.Interface) error {
	for _, gvr := range []schema.GroupVersionResource{shardserver.APIExports, apiResourceSchemas} {
		list, err := c.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, u := range list.Items {
			a := u.GetAnnotations()
			detail("cache: shards/%s/clusters/%s %s %s (uid %s, origin resourceVersion %s)", a[kcpcache.AnnotationShard], a[kcpcache.AnnotationCluster], gvr.Resource, u.GetName(), u.GetUID(), a[kcpcache.AnnotationOriginalResourceVersion])
		}
	}
	return nil
}

// stop stops every server that runs, shards before the cache, then the
// regions' caches; it reports what failed on the way down.
func (d *demo) stop() error {
	var errs []error
	for name, s := range d.shards {
		if s != nil {
			if err := s.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("shard %s: %w", name, err))
			}
		}
	}
	if d.cache != nil {
		if err := d.cache.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("cache server: %w", err))
		}
	}
	for _, r := range d.regions {
		if err := r.stop(); err != nil {
			errs = append(errs, fmt.Errorf("cache %s: %w", r.name, err))
		}
	}
	return errors.Join(errs...)
}

// tailLog prints the last n lines of the servers' log.
func (d *demo) tailLog(w io.Writer, n int) {
	f, err := os.Open(d.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

func scoped(cfg *rest.Config, prefix string) dynamic.Interface {
	c := rest.CopyConfig(cfg)
	c.Host = kcpcache.JoinHostPath(c.Host, prefix)
	return dynamic.NewForConfigOrDie(c)
}

func object(gvr schema.GroupVersionResource, kind, name string, spec map[string]interface{}) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kind,
		"metadata":   map[string]interface{}{"name": name},
		"spec":       spec,
	}}
}
