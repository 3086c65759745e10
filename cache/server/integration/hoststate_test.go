package integration_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// processState is what a host process sets for itself that a cache mounted
// in it could change behind its back: each entry is a setting and its value.
type processState map[string]string

func recordProcessState(t *testing.T) processState {
	t.Helper()
	s := processState{}
	// Feature gates: every gate the process knows, and its value.
	for name := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		s["feature gate "+string(name)] = fmt.Sprint(utilfeature.DefaultFeatureGate.Enabled(name))
	}
	// Metrics: every family the global registry serves keeps its type and
	// help (a family replaced or unregistered would change or vanish), and
	// hidden metrics stay as shown or hidden as they were. Families added
	// are compared separately.
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		s["metric "+f.GetName()] = f.GetType().String() + " " + f.GetHelp()
	}
	s["metrics show hidden"] = fmt.Sprint(metrics.ShouldShowHidden())
	// klog: every flag's value (verbosity, vmodule, outputs), and the
	// global logger.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { s["klog -"+f.Name] = f.Value.String() })
	s["klog logger"] = fmt.Sprintf("%T", klog.Background().GetSink())
	// The default HTTP transport and client, which client-go does not use
	// but a host's other code may.
	tr, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		t.Fatalf("http.DefaultTransport is a %T", http.DefaultTransport)
	}
	s["http.DefaultTransport"] = fmt.Sprintf("%p", tr)
	s["http.DefaultTransport settings"] = fmt.Sprintf("proxy=%v tls=%p maxIdle=%d maxIdlePerHost=%d idle=%s h2=%v",
		reflect.ValueOf(tr.Proxy).Pointer(), tr.TLSClientConfig, tr.MaxIdleConns, tr.MaxIdleConnsPerHost, tr.IdleConnTimeout, tr.ForceAttemptHTTP2)
	s["http.DefaultClient"] = fmt.Sprintf("transport=%v timeout=%s", http.DefaultClient.Transport, http.DefaultClient.Timeout)
	// The environment, the working directory and the runtime's knobs.
	env := os.Environ()
	sort.Strings(env)
	s["environment"] = fmt.Sprint(env)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	s["working directory"] = wd
	s["GOMAXPROCS"] = fmt.Sprint(runtime.GOMAXPROCS(0))
	s["memory limit"] = fmt.Sprint(debug.SetMemoryLimit(-1))
	gc := debug.SetGCPercent(100)
	debug.SetGCPercent(gc)
	s["GC percent"] = fmt.Sprint(gc)
	// Crash and error handling every server of the process shares.
	s["panic handlers"] = fmt.Sprint(len(utilruntime.PanicHandlers))
	s["error handlers"] = fmt.Sprint(len(utilruntime.ErrorHandlers))
	s["really crash"] = fmt.Sprint(utilruntime.ReallyCrash)
	return s
}

// A cache mounted in a host and stopped again leaves the host's process as
// it found it: a host that runs with ListFromCacheSnapshot on (upstream's
// default, and kcp's) keeps it on for its own watch caches, and no feature
// gate, metric family, klog setting, default transport, environment
// variable or runtime setting the host had changes. Not parallel: it reads
// the process's state, which other tests' servers share.
func TestMountedCacheLeavesTheHostProcessAsItFoundIt(t *testing.T) {
	snapshots := string(features.ListFromCacheSnapshot)
	was := utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot)
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{snapshots: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{snapshots: was}); err != nil {
			t.Error(err)
		}
	})
	before := recordProcessState(t)

	ctx := testContext(t)
	w := &hookWiring{}
	srv, err := cachetest.Start(ctx, cachetest.Options{Mounted: true, WireHost: w.wire})
	if err != nil {
		t.Fatal(err)
	}
	// The cache serves and replicates: the code paths that could touch the
	// process run.
	copies := dyn(t, srv, cachetest.DefaultHostShard, "root")
	if _, err := copies.Resource(apiExports).Create(ctx, apiExport("state", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := copies.Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the host's replication hook healthy", func(ctx context.Context) error {
		return expectStatus(ctx, srv.HostConfig(), "/readyz/cache-replication", http.StatusOK)
	})
	if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Error("ListFromCacheSnapshot is off while the host runs a mounted cache")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	after := recordProcessState(t)

	for _, k := range sortedKeys(before) {
		if got, ok := after[k]; !ok {
			t.Errorf("%s: gone (was %q)", k, before[k])
		} else if got != before[k] {
			t.Errorf("%s: %q, was %q", k, got, before[k])
		}
	}
	var added []string
	for _, k := range sortedKeys(after) {
		if _, ok := before[k]; !ok {
			added = append(added, k)
		}
	}
	// Metric families the cache's own code and upstream's servers register
	// or first report appear: they are the cache's to add to the host's
	// /metrics. Nothing else may appear.
	for _, k := range added {
		if !strings.HasPrefix(k, "metric ") {
			t.Errorf("%s: new setting %q", k, after[k])
		}
	}
	t.Logf("%d settings compared; %d metric families added", len(before), len(added))
}

func sortedKeys(m processState) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
