package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/examples/internal/run"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

var apiExports = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}

// The dashboard and the alert rules name only metrics that the cache server
// and a shard running the hook export, once the events they watch have
// happened. They all run in one process here: a shard serving a mounted
// cache (--run-cache-server) as kcp's shards can, and two caches in regions
// mirroring each other, so one scrape holds the cache server's metrics, the
// hook's and the mirror's; apart, each process exports its own.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	ctx := testContext(t)
	referenced := referencedMetrics(t)
	// A parser that finds nothing would pass; these are what the panels and
	// alerts are for.
	for _, name := range []string{
		"apiserver_request_total", "apiserver_request_duration_seconds_bucket", "apiserver_response_sizes_bucket",
		"apiserver_current_inflight_requests", "apiserver_longrunning_requests",
		"kcp_cache_embedded_etcd_db_size_bytes", "kcp_cache_embedded_etcd_quota_bytes",
		"kcp_cache_shard_heartbeat_timestamp_seconds", "kcp_cache_shard_heartbeat_lease_seconds", "kcp_cache_shard_confirmed",
		"kcp_cache_degraded", "kcp_cache_replication_workqueue_depth",
		"kcp_cache_mirror_partition_lag_seconds", "kcp_cache_mirror_partition_lag_revisions",
		"kcp_cache_mirror_confirmed_age_seconds", "kcp_cache_mirror_held_partitions", "kcp_cache_home_conflicts",
		"kcp_cache_mirror_freshness_checks_total",
	} {
		if !referenced.Has(name) {
			t.Errorf("nothing references %s", name)
		}
	}

	shard, err := run.StartShard(ctx, t.TempDir(), "alpha", func(o *shardserver.Options) { o.Cache.RunCacheServer = true })
	if err != nil {
		t.Fatal(err)
	}
	cachetest.StopOnCleanup(t, "shard alpha", shard.Stop)

	// Replication, a heartbeat and the partition's confirmation follow from
	// an object of the shard's own.
	if _, err := cachetest.Dynamic(t, shard.Config, "/clusters/root").Resource(apiExports).Create(ctx, apiExport("replicated"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Requests through the cache: a create, lists through a partition and
	// through the wildcard, a watch that sees an event, and a denial.
	partition := cachetest.Dynamic(t, shard.Config, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "zeta", Cluster: "root"}))
	wildcard := cachetest.Dynamic(t, shard.Config, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "*", Cluster: "*"}))
	if _, err := partition.Resource(apiExports).Create(ctx, apiExport("pushed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := partition.Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := wildcard.Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	watch, err := wildcard.Resource(apiExports).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := partition.Resource(apiExports).Create(ctx, apiExport("watched"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-watch.ResultChan()
	watch.Stop()
	// Data objects are never stored in the system partition, whoever asks.
	system := cachetest.Dynamic(t, shard.Config, kcpcache.ServicePrefix)
	if _, err := system.Resource(apiExports).Create(ctx, apiExport("denied"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("creating an APIExport in the system partition: %v, want 403", err)
	}

	// Two caches in regions, each mirroring the other: a shard homed at
	// east writes, west mirrors it and answers a consistent read of it
	// (a freshness check), so the mirror's metrics are exported. They
	// share this process's metrics registry with the shard's.
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{}, "east", "west")
	east, west := regions["east"].Srv, regions["west"].Srv
	atEast := cachetest.Dynamic(t, east.ShardConfig(t, "shard-east"), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "shard-east", Cluster: "root"}))
	if _, err := atEast.Resource(apiExports).Create(ctx, apiExport("homed-at-east"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	atWest := cachetest.Dynamic(t, west.Config(), kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "shard-east", Cluster: kcpcache.Wildcard}))
	cachetest.Eventually(t, "west mirrors shard-east's partition", func(ctx context.Context) error {
		list, err := atWest.Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("west lists %d objects of shard-east, want 1", len(list.Items))
		}
		return nil
	})

	// Each scrape runs to its end (the test's context, not the poll's), so
	// that a failure names what is missing rather than a cut-off scrape.
	cachetest.Eventually(t, "every metric the dashboard and the alerts name exported", func(context.Context) error {
		metrics, err := scrape(ctx, shard.Config)
		if err != nil {
			return err
		}
		var listed bool
		for _, line := range strings.Split(metrics, "\n") {
			listed = listed || strings.HasPrefix(line, "apiserver_request_total{") &&
				containsAll(line, `code="200"`, `group="apis.kcp.io"`, `resource="apiexports"`, `verb="LIST"`)
		}
		if !listed {
			return fmt.Errorf(`no apiserver_request_total{code="200",resource="apiexports",verb="LIST"}`)
		}
		// west knows how far behind east it is for shard-east's partition:
		// current, once it has applied east's write.
		var current bool
		for _, line := range strings.Split(metrics, "\n") {
			current = current || strings.HasPrefix(line, "kcp_cache_mirror_partition_lag_revisions{") &&
				containsAll(line, `home="east"`, `shard="shard-east"`, `resource="apiexports.apis.kcp.io"`) && strings.HasSuffix(line, " 0")
		}
		if !current {
			return fmt.Errorf(`no kcp_cache_mirror_partition_lag_revisions{home="east",shard="shard-east",resource="apiexports.apis.kcp.io"} 0`)
		}
		if missing := sets.List(referenced.Difference(exportedNames(metrics))); len(missing) > 0 {
			return fmt.Errorf("not exported: %s", strings.Join(missing, ", "))
		}
		return nil
	})
}

// The alert rules cover what an operator of a cache must hear about.
func TestAlertsCoverTheCache(t *testing.T) {
	var alerts []string
	for _, r := range alertRules(t) {
		alerts = append(alerts, r.Alert)
		if r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
			t.Errorf("alert %q needs an expr, a for, a severity and a summary", r.Alert)
		}
	}
	for _, want := range []string{
		"KcpCacheShardHeartbeatExpired", "KcpCacheShardUnconfirmed", "KcpCacheReplicationDegraded",
		"KcpCacheEtcdDatabaseNearQuota", "KcpCacheRequestErrors", "KcpCacheListLatencyHigh",
		"KcpCacheMirrorBehind", "KcpCacheHomeUnreachable", "KcpCachePartitionHeld", "KcpCacheHomeConflict",
		"KcpCacheCredentialsReloadFailing",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// metricNames finds the metric names in PromQL loosely: what is left of the
// identifiers once strings, label matchers, ranges and grouping clauses are
// gone, apart from functions, aggregations and keywords.
func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (resource, verb) (rate(apiserver_request_total{job=~"$job", code=~"5.."}[$__rate_interval]))`: {"apiserver_request_total"},
		`time() - kcp_cache_shard_heartbeat_timestamp_seconds > kcp_cache_shard_heartbeat_lease_seconds`:      {"kcp_cache_shard_heartbeat_lease_seconds", "kcp_cache_shard_heartbeat_timestamp_seconds"},
		`histogram_quantile(0.99, sum by (le, resource) (rate(x_bucket{verb="LIST"}[5m]))) > 5e3`:             {"x_bucket"},
		`max by (job, instance, reason) (kcp_cache_degraded{reason!="Starting"}) == 1 and on (job) up`:        {"kcp_cache_degraded", "up"},
		`label_values(kcp_cache_epoch_info, job)`:                                                             {"kcp_cache_epoch_info"},
		`a / ignoring(code) group_left b offset 5m`:                                                           {"a", "b"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %v, want %v", expr, got, want)
		}
	}
}

var (
	stringLiteral  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	labelMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	rangeSelector  = regexp.MustCompile(`\[[^\]]*\]`)
	groupingClause = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	numberLiteral  = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?[smhdwy]?\b`)
	identifier     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValuesArg = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)[^,)]*,\s*[a-zA-Z_]+\s*\)`)
	promqlKeywords = sets.New("and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan")
)

func metricNames(expr string) []string {
	names := sets.New[string]()
	// Grafana's label_values(metric, label): the label is no metric.
	for _, m := range labelValuesArg.FindAllStringSubmatch(expr, -1) {
		names.Insert(m[1])
	}
	expr = labelValuesArg.ReplaceAllString(expr, "")
	for _, re := range []*regexp.Regexp{stringLiteral, labelMatchers, rangeSelector, groupingClause, numberLiteral} {
		expr = re.ReplaceAllString(expr, " ")
	}
	for _, loc := range identifier.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " \t\n"), "(") || promqlKeywords.Has(strings.ToLower(name)) {
			continue // a function or an aggregation
		}
		names.Insert(name)
	}
	return sets.List(names)
}

// referencedMetrics returns every metric named by the dashboard's queries
// and variables and by the alert rules' expressions.
func referencedMetrics(t *testing.T) sets.Set[string] {
	t.Helper()
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard interface{}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var queries []string
	collectQueries(dashboard, &queries)
	for _, r := range alertRules(t) {
		queries = append(queries, r.Expr)
	}
	names := sets.New[string]()
	for _, q := range queries {
		names.Insert(metricNames(q)...)
	}
	if len(queries) == 0 || names.Len() == 0 {
		t.Fatalf("found %d queries naming %d metrics", len(queries), names.Len())
	}
	t.Logf("%d queries name %d metrics: %v", len(queries), names.Len(), sets.List(names))
	return names
}

// collectQueries appends a dashboard's PromQL: the panels' targets' expr
// and the query variables' queries.
func collectQueries(node interface{}, out *[]string) {
	switch n := node.(type) {
	case map[string]interface{}:
		for k, v := range n {
			switch s := v.(type) {
			case string:
				if k == "expr" || (k == "query" && n["refId"] != nil) {
					*out = append(*out, s)
				}
			default:
				collectQueries(v, out)
			}
		}
	case []interface{}:
		for _, v := range n {
			collectQueries(v, out)
		}
	}
}

// rule is what the tests read of a Prometheus alerting rule.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(".", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []rule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml holds no rules")
	}
	return rules
}

// exportedNames returns the names of the samples in a scrape (a histogram's
// _bucket, _sum and _count each).
func exportedNames(metrics string) sets.Set[string] {
	names := sets.New[string]()
	for _, line := range strings.Split(metrics, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names.Insert(line[:i])
		}
	}
	return names
}

// scrape returns cfg's server's /metrics.
func scrape(ctx context.Context, cfg *rest.Config) (string, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func apiExport(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": apiExports.GroupVersion().String(), "kind": "APIExport",
		"metadata": map[string]interface{}{"name": name},
	}}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
