package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The data plane's requests are in upstream's request metrics under their
// group, version, resource, verb, scope and code, through a partition and
// through a wildcard alike, with watches as WATCH, never labelled by
// partition or identity hash.
func TestDataPlaneRequestsAreInUpstreamRequestMetrics(t *testing.T) {
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	// Other tests of this process leave their counts in the same registry:
	// what counts is the growth since this test started.
	const exports = `group="apis.kcp.io",resource="apiexports"`
	before := scrape(t, srv)
	count := func(name string, labels ...string) float64 {
		labels = append([]string{exports}, labels...)
		return sumSamples(scrape(t, srv), name, labels...) - sumSamples(before, name, labels...)
	}

	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("counted", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range [][2]string{{"amber", "root"}, {"*", "*"}} {
		if _, err := dyn(t, srv, s[0], s[1]).Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := count("apiserver_request_total", `scope="resource"`, `verb="POST"`, `version="v1alpha1"`, `code="201"`); got != 1 {
		t.Errorf("apiserver_request_total for the create: %v, want 1", got)
	}
	if got := count("apiserver_request_total", `scope="cluster"`, `verb="LIST"`, `version="v1alpha1"`, `code="200"`); got != 2 {
		t.Errorf("apiserver_request_total for the 2 lists grew by %v", got)
	}
	if got := count("apiserver_request_duration_seconds_count", `verb="LIST"`); got != 2 {
		t.Errorf("apiserver_request_duration_seconds for the 2 lists grew by %v", got)
	}
	if got := count("apiserver_response_sizes_count", `verb="LIST"`); got != 2 {
		t.Errorf("apiserver_response_sizes for the 2 lists grew by %v", got)
	}

	// A watch is long-running while open and counted as WATCH when it ends;
	// upstream keeps it out of the SLI latencies, and the LIST latencies do
	// not grow.
	watch, err := dyn(t, srv, "*", "*").Resource(apiExports).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "the watch counted as long-running", func(context.Context) error {
		if got := count("apiserver_longrunning_requests", `verb="WATCH"`); got != 1 {
			return errorf("apiserver_longrunning_requests: %v", got)
		}
		return nil
	})
	if _, err := dyn(t, srv, "amber", "root").Resource(apiExports).Create(ctx, apiExport("watched", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-watch.ResultChan()
	watch.Stop()
	cachetest.Eventually(t, "the watch counted", func(context.Context) error {
		if got := count("apiserver_request_total", `verb="WATCH"`, `code="200"`); got != 1 {
			return errorf("apiserver_request_total for the watch: %v", got)
		}
		return nil
	})
	if got := count("apiserver_request_duration_seconds_count", `verb="WATCH"`); got != 1 {
		t.Errorf("apiserver_request_duration_seconds for the watch: %v, want 1 (under WATCH)", got)
	}
	if got := count("apiserver_request_sli_duration_seconds_count", `verb="WATCH"`); got != 0 {
		t.Errorf("apiserver_request_sli_duration_seconds has %v watches, want none", got)
	}
	if got := count("apiserver_request_duration_seconds_count", `verb="LIST"`); got != 2 {
		t.Errorf("the LIST latencies grew by %v with the watch, want the 2 lists", got)
	}

	// The request guard's refusals are counted as the resource's requests.
	_, err = dyn(t, srv, "*", "*").Resource(apiExports).Create(ctx, apiExport("refused", nil), metav1.CreateOptions{})
	if !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("create through */*: %v, want 405", err)
	}
	if got := count("apiserver_request_total", `verb="POST"`, `code="405"`); got != 1 {
		t.Errorf("apiserver_request_total for the refused create: %v, want 1", got)
	}

	// An identity of a known resource is counted under the resource's name.
	const identityHash = "0123456789abcdef0123456789abcdef"
	withIdentity := apiExports
	withIdentity.Resource += ":" + identityHash
	if _, err := dyn(t, srv, "*", "*").Resource(withIdentity).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := count("apiserver_request_total", `verb="LIST"`, `code="200"`); got != 3 {
		t.Errorf("apiserver_request_total for 3 lists, one of an identity, grew by %v", got)
	}
	// A resource nobody serves is not recorded: its name is the client's.
	unknown := schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "nonsense"}
	if _, err := dyn(t, srv, "amber", "root").Resource(unknown).List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("list of an unknown resource: %v, want 404", err)
	}

	for _, line := range strings.Split(scrape(t, srv), "\n") {
		if !strings.HasPrefix(line, "apiserver_") || strings.Contains(before, line) {
			continue
		}
		for _, leak := range []string{"amber", identityHash, "nonsense"} {
			if strings.Contains(line, leak) {
				t.Errorf("a series carries %q: %s", leak, line)
			}
		}
	}
}

// scrape returns the server's /metrics.
func scrape(t *testing.T, srv *cachetest.Server) string {
	t.Helper()
	client, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := newRequest(context.Background(), "GET", srv.Config().Host+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Config().BearerToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// A refused scrape would read as no samples at all.
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	return string(body)
}

// sumSamples adds up the samples of metric name in a scrape whose labels
// contain every fragment in labels; a sample that does not parse counts 0.
func sumSamples(scrape, name string, labels ...string) float64 {
	sum, _ := parseSamples(scrape, name, labels...)
	return sum
}

// parseSamples adds up the samples of metric name in a scrape whose labels
// contain every fragment in labels. The scrape is split on newlines with no
// limit on a line's length: bufio.Scanner stops at its first line over its
// limit, and every metric sorted after that line would read 0.
func parseSamples(scrape, name string, labels ...string) (float64, error) {
	var sum float64
	for _, line := range strings.Split(scrape, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(line, l)
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return sum, fmt.Errorf("parsing %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}
