package integration_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// metricSum adds up the samples of a metric whose labels contain every
// fragment in labels, in a scrape of srv's /metrics.
func metricSum(t *testing.T, srv *cachetest.Server, name string, labels ...string) float64 {
	t.Helper()
	sum, err := parseSamples(scrape(t, srv), name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// Consistent lists (no resourceVersion) in every scope shape are answered
// by the watch cache after a progress check against etcd, not by etcd.
func TestConsistentListsAreServedFromTheWatchCache(t *testing.T) {
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	for _, p := range partitions {
		if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, apiExport("shared", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const resourceLabel = `resource="apiexports"`
	const clusterIndex = `index="f:cache.kcp.io/cluster"`
	indexedBefore := metricSum(t, srv, "apiserver_cache_list_total", resourceLabel, clusterIndex)
	listsBefore := metricSum(t, srv, "apiserver_cache_list_total", resourceLabel)
	consistentBefore := metricSum(t, srv, "apiserver_watch_cache_consistent_read_total", `success="true"`, `fallback="false"`, `resource="apiexports"`)
	fallbackBefore := metricSum(t, srv, "apiserver_watch_cache_consistent_read_total", `fallback="true"`, `resource="apiexports"`)

	scopes := [][2]string{{"amber", "root"}, {"amber", "*"}, {"*", "root"}, {"*", "*"}}
	for _, s := range scopes {
		list, err := dyn(t, srv, s[0], s[1]).Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			t.Fatalf("empty list in %v", s)
		}
	}

	if got := metricSum(t, srv, "apiserver_cache_list_total", resourceLabel) - listsBefore; got < float64(len(scopes)) {
		t.Errorf("apiserver_cache_list_total grew by %v for %d lists", got, len(scopes))
	}
	if got := metricSum(t, srv, "apiserver_watch_cache_consistent_read_total", `success="true"`, `fallback="false"`, `resource="apiexports"`) - consistentBefore; got < float64(len(scopes)) {
		t.Errorf("consistent reads from cache grew by %v for %d lists", got, len(scopes))
	}
	// Only the "*/root" list can use the cluster index; the others are
	// key-prefix reads.
	if got := metricSum(t, srv, "apiserver_cache_list_total", resourceLabel, clusterIndex) - indexedBefore; got != 1 {
		t.Errorf("lists through the cluster index grew by %v, want 1", got)
	}
	if got := metricSum(t, srv, "apiserver_watch_cache_consistent_read_total", `fallback="true"`, `resource="apiexports"`) - fallbackBefore; got != 0 {
		t.Errorf("%v consistent reads fell back to etcd", got)
	}
}
