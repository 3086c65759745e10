package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

const crdsPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

func scopedPath(shard, cluster, apiPath string) string {
	return kcpcache.ScopedPath(kcpcache.Scope{Shard: shard, Cluster: cluster}, apiPath)
}

func exportBody(name string) string {
	return fmt.Sprintf(`{"apiVersion":"apis.kcp.io/v1alpha1","kind":"APIExport","metadata":{"name":%q}}`, name)
}

func crdBody(name string) string {
	return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"things.%s.dev"},"spec":{"group":"%s.dev","scope":"Cluster","names":{"plural":"things","kind":"Thing"},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object"}}}]}}`, name, name)
}

// call sends one request with cfg's credentials and decodes an error Status.
func call(t *testing.T, cfg *rest.Config, method, path, body string) (int, metav1.Status) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(testContext(t), method, cfg.Host+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var status metav1.Status
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &status); err != nil {
			t.Fatalf("%s %s: %d with a body that is not a Status: %q", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, status
}

type refusal struct {
	name, method, path, body string
	rule                     authorization.Rule
}

// expectRefusals checks that every request is a 403 Status naming its rule
// and that etcd is unchanged afterwards.
func expectRefusals(t *testing.T, srv *cachetest.Server, cfg *rest.Config, refusals []refusal) {
	t.Helper()
	before := etcdState(t, srv)
	for _, r := range refusals {
		code, status := call(t, cfg, r.method, r.path, r.body)
		if code != http.StatusForbidden || status.Reason != metav1.StatusReasonForbidden {
			t.Errorf("%s: %s %s = %d %s (%s), want 403 Forbidden", r.name, r.method, r.path, code, status.Reason, status.Message)
			continue
		}
		if !strings.Contains(status.Message, string(r.rule)) {
			t.Errorf("%s: message %q does not name rule %q", r.name, status.Message, r.rule)
		}
	}
	if after := etcdState(t, srv); !reflect.DeepEqual(before, after) {
		t.Errorf("refused requests changed etcd:\nbefore %v\nafter  %v", before, after)
	}
}

// A shard's identity creates, updates and deletes in its own partition,
// reads and watches every partition, and is refused everywhere else.
func TestShardIdentityWritesOnlyItsOwnPartition(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	amber := srv.ShardConfig(t, "amber")
	// Something of blue's to try to overwrite.
	if _, err := dyn(t, srv, "blue", "root").Resource(apiExports).Create(ctx, apiExport("blues", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	own := scopedDyn(t, amber, "amber", "root").Resource(apiExports)
	created, err := own.Create(ctx, apiExport("mine", map[string]interface{}{"v": "1"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating in its own partition: %v", err)
	}
	created.Object["spec"] = map[string]interface{}{"v": "2"}
	if _, err := own.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating in its own partition: %v", err)
	}
	if _, err := scopedDyn(t, amber, "amber", "org1").Resource(apiExports).Create(ctx, apiExport("other-cluster", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating in another cluster of its own shard: %v", err)
	}

	all := scopedDyn(t, amber, "*", "*").Resource(apiExports)
	list, err := all.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing */*: %v", err)
	}
	if got, want := partitionsOf(list.Items), []string{"amber/org1/other-cluster", "amber/root/mine", "blue/root/blues"}; !reflect.DeepEqual(got, want) {
		t.Errorf("*/* lists %v, want %v", got, want)
	}
	if _, err := scopedDyn(t, amber, "blue", "root").Resource(apiExports).Get(ctx, "blues", metav1.GetOptions{}); err != nil {
		t.Errorf("reading blue's partition: %v", err)
	}
	w, err := all.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatalf("watching */*: %v", err)
	}
	defer w.Stop()
	if err := own.Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting in its own partition: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Deleted {
			t.Errorf("watch event %s, want the deletion", ev.Type)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event for the deletion through */*")
	}

	blues := scopedPath("blue", "root", exportsPath)
	expectRefusals(t, srv, amber, []refusal{
		{"create in another shard", "POST", blues, exportBody("x"), authorization.RuleOwnPartition},
		{"update in another shard", "PUT", blues + "/blues", exportBody("blues"), authorization.RuleOwnPartition},
		{"delete in another shard", "DELETE", blues + "/blues", "", authorization.RuleOwnPartition},
		{"deletecollection in another shard", "DELETE", blues, "", authorization.RuleOwnPartition},
		{"patch in another shard", "PATCH", blues + "/blues", `{"spec":{"a":1}}`, authorization.RuleOwnPartition},
		{"create through its own wildcard", "POST", scopedPath("amber", "*", exportsPath), exportBody("x"), authorization.RuleOwnPartition},
		{"create unprefixed", "POST", exportsPath, exportBody("x"), authorization.RuleSystemPartitionCRDsOnly},
		{"list unprefixed", "GET", exportsPath, "", authorization.RuleSystemPartition},
		{"create in the system partition by path", "POST", scopedPath(kcpcache.SystemShard, kcpcache.SystemCluster, exportsPath), exportBody("x"), authorization.RuleSystemPartitionCRDsOnly},
		{"create in another shard's system cluster", "POST", scopedPath("s1", kcpcache.SystemCluster, exportsPath), exportBody("x"), authorization.RuleReservedName},
		{"create in a reserved shard", "POST", scopedPath(kcpcache.SystemShard, "root", exportsPath), exportBody("x"), authorization.RuleReservedName},
		{"create in a reserved cluster of its own shard", "POST", scopedPath("amber", kcpcache.SystemCluster, exportsPath), exportBody("x"), authorization.RuleReservedName},
		{"create in a system:cache cluster", "POST", scopedPath("amber", "system:cache-x", exportsPath), exportBody("x"), authorization.RuleReservedName},
		{"create a CRD unprefixed", "POST", crdsPath, crdBody("amber"), authorization.RuleSystemPartition},
		{"create a CRD in its partition", "POST", scopedPath("amber", "root", crdsPath), crdBody("amber"), authorization.RuleCRDWritesUnprefixed},
		{"delete a bootstrapped CRD", "DELETE", crdsPath + "/apiexports.apis.kcp.io", "", authorization.RuleSystemPartition},
	})
}

// system:masters may do everything but what would break the partitioning:
// CRDs in a partition, data objects in the system partition.
func TestMastersCannotBreakThePartitioning(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	expectRefusals(t, srv, srv.Config(), []refusal{
		{"create a CRD in a partition", "POST", scopedPath("s1", "root", crdsPath), crdBody("masters"), authorization.RuleCRDWritesUnprefixed},
		{"delete a CRD in a partition", "DELETE", scopedPath("s1", "root", crdsPath) + "/apiexports.apis.kcp.io", "", authorization.RuleCRDWritesUnprefixed},
		{"create a data object unprefixed", "POST", exportsPath, exportBody("x"), authorization.RuleSystemPartitionCRDsOnly},
		{"create a data object unprefixed below the service prefix", "POST", kcpcache.ServicePrefix + exportsPath, exportBody("x"), authorization.RuleSystemPartitionCRDsOnly},
	})
	// A deliberate write into a reserved partition path is theirs to make.
	if code, status := call(t, srv.Config(), "POST", scopedPath(kcpcache.SystemShard, "root", exportsPath), exportBody("x")); code != http.StatusCreated {
		t.Errorf("masters writing a reserved partition: %d %s", code, status.Message)
	}
}

// A reader reads every partition and writes nothing; an authenticated user
// without a role and an anonymous one reach only health checks.
func TestReadersReadAndOthersOnlyProbeHealth(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	if _, err := dyn(t, srv, "blue", "root").Resource(apiExports).Create(ctx, apiExport("blues", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := srv.UserConfig(t, "dashboard", kcpcache.ReadersGroup)
	list, err := scopedDyn(t, reader, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("reader listing */*: %v (%d items)", err, len(list.Items))
	}
	if _, err := scopedDyn(t, reader, "blue", "root").Resource(apiExports).Get(ctx, "blues", metav1.GetOptions{}); err != nil {
		t.Errorf("reader getting: %v", err)
	}
	blues := scopedPath("blue", "root", exportsPath)
	expectRefusals(t, srv, reader, []refusal{
		{"reader creates", "POST", blues, exportBody("x"), authorization.RuleReadOnly},
		{"reader deletes", "DELETE", blues + "/blues", "", authorization.RuleReadOnly},
		{"reader reads the system partition", "GET", crdsPath, "", authorization.RuleSystemPartition},
	})

	nobody := srv.UserConfig(t, "nobody", "some-group")
	expectRefusals(t, srv, nobody, []refusal{
		{"no role lists", "GET", scopedPath("*", "*", exportsPath), "", authorization.RuleDefaultDeny},
		{"no role creates", "POST", blues, exportBody("x"), authorization.RuleWriters},
		{"no role reads metrics", "GET", "/metrics", "", authorization.RuleDefaultDeny},
	})
	for _, cfg := range []*rest.Config{nobody, srv.AnonymousConfig()} {
		if code, _ := call(t, cfg, "GET", "/readyz", ""); code != http.StatusOK {
			t.Errorf("/readyz: %d", code)
		}
	}
	if code, _ := call(t, srv.AnonymousConfig(), "GET", scopedPath("*", "*", exportsPath), ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous list: %d, want 401", code)
	}
}

// A metrics reader scrapes /metrics and probes health over HTTPS, and is
// refused every object, discovery and the cache's own /kcp-cache/* paths.
func TestMetricsReaderReadsOnlyMetricsAndHealth(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	if _, err := dyn(t, srv, "blue", "root").Resource(apiExports).Create(ctx, apiExport("blues", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scraper := srv.UserConfig(t, "prometheus", kcpcache.MetricsReadersGroup)
	client, err := discovery.NewDiscoveryClientForConfig(scraper)
	if err != nil {
		t.Fatal(err)
	}
	body, err := client.RESTClient().Get().AbsPath(kcpcache.MetricsPath).DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), "# TYPE kcp_cache_") {
		t.Fatalf("metrics reader scraping %s: %v, %d bytes without the cache's metrics", kcpcache.MetricsPath, err, len(body))
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/readyz/ping", "/livez/ping"} {
		if code, status := call(t, scraper, "GET", path, ""); code != http.StatusOK {
			t.Errorf("metrics reader probing %s: %d %s", path, code, status.Message)
		}
	}
	blues := scopedPath("blue", "root", exportsPath)
	expectRefusals(t, srv, scraper, []refusal{
		{"metrics reader lists */*", "GET", scopedPath("*", "*", exportsPath), "", authorization.RuleDefaultDeny},
		{"metrics reader gets an object", "GET", blues + "/blues", "", authorization.RuleDefaultDeny},
		{"metrics reader watches", "GET", blues + "?watch=true", "", authorization.RuleDefaultDeny},
		{"metrics reader creates", "POST", blues, exportBody("x"), authorization.RuleWriters},
		{"metrics reader reads the system partition", "GET", crdsPath, "", authorization.RuleSystemPartition},
		{"metrics reader reads heartbeats", "GET", scopedPath("*", kcpcache.HeartbeatCluster, "/apis/"+kcpcache.HeartbeatResource.GroupVersion().String()+"/"+kcpcache.HeartbeatResource.Resource), "", authorization.RuleReservedName},
		{"metrics reader discovers", "GET", "/apis", "", authorization.RuleDefaultDeny},
		{"metrics reader asks a home revision", "GET", kcpcache.RevisionPath + "?shard=blue&resource=apiexports.apis.kcp.io", "", authorization.RuleDefaultDeny},
		{"metrics reader reads every home revision", "GET", kcpcache.RevisionsPath, "", authorization.RuleDefaultDeny},
		{"metrics reader reads home claims", "GET", kcpcache.HomesPath, "", authorization.RuleDefaultDeny},
		{"metrics reader resets metrics", "DELETE", kcpcache.MetricsPath, "", authorization.RuleDefaultDeny},
	})
}

// --token-auth-file identities follow the same rules as certificates.
func TestTokenFileIdentities(t *testing.T) {
	t.Parallel()
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("blue-token,system:kcp:shard:blue,blue-uid\nreader-token,viewer,viewer-uid,\""+kcpcache.ReadersGroup+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) { o.Authentication.TokenAuthFile = tokens }))
	ctx := testContext(t)
	blue := srv.AnonymousConfig()
	blue.BearerToken = "blue-token"
	if _, err := scopedDyn(t, blue, "blue", "root").Resource(apiExports).Create(ctx, apiExport("blues", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("token shard creating in its partition: %v", err)
	}
	expectRefusals(t, srv, blue, []refusal{
		{"token shard creates in another", "POST", scopedPath("amber", "root", exportsPath), exportBody("x"), authorization.RuleOwnPartition},
	})
	viewer := srv.AnonymousConfig()
	viewer.BearerToken = "reader-token"
	if _, err := scopedDyn(t, viewer, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("token reader listing: %v", err)
	}
	expectRefusals(t, srv, viewer, []refusal{
		{"token reader creates", "POST", scopedPath("blue", "root", exportsPath), exportBody("x"), authorization.RuleReadOnly},
	})
	wrong := srv.AnonymousConfig()
	wrong.BearerToken = "not-a-token"
	if code, _ := call(t, wrong, "GET", scopedPath("*", "*", exportsPath), ""); code != http.StatusUnauthorized {
		t.Errorf("unknown token: %d, want 401", code)
	}
}

// Denials are audited (who, what, where, which rule), and /metrics serves
// their counter by rule. How denials are counted is the authorization
// package's test: the counter is the process's, and the tests running next
// to this one deny by the same rules.
func TestDenialsAreAuditedAndTheirCounterServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.Audit.PolicyFile = policy
		o.Audit.LogOptions.Path = auditLog
	}))
	path := scopedPath("blue", "org7", exportsPath)
	// The partition filter hands upstream the path without the scope; the
	// scope is in an annotation of ours.
	auditedURI := exportsPath
	if code, _ := call(t, srv.ShardConfig(t, "amber"), "POST", path, exportBody("audited")); code != http.StatusForbidden {
		t.Fatalf("got %d, want 403", code)
	}
	cachetest.Eventually(t, "the denial is audited", func(context.Context) error {
		b, err := os.ReadFile(auditLog)
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			var ev struct {
				Stage          string `json:"stage"`
				RequestURI     string `json:"requestURI"`
				Verb           string `json:"verb"`
				User           struct{ Username string }
				ResponseStatus struct{ Code int } `json:"responseStatus"`
				Annotations    map[string]string  `json:"annotations"`
			}
			if json.Unmarshal([]byte(line), &ev) != nil || ev.Stage != "ResponseComplete" || ev.RequestURI != auditedURI || ev.Annotations[authorization.AuditAnnotationPartition] != "blue/org7" {
				continue
			}
			if ev.User.Username != kcpcache.ShardUser("amber") || ev.Verb != "create" || ev.ResponseStatus.Code != 403 ||
				ev.Annotations["authorization.k8s.io/decision"] != "forbid" ||
				!strings.Contains(ev.Annotations["authorization.k8s.io/reason"], string(authorization.RuleOwnPartition)) {
				return fmt.Errorf("audit event does not say who was refused what by which rule: %s", line)
			}
			return nil
		}
		return fmt.Errorf("no audit event for %s yet", path)
	})

	rule := fmt.Sprintf("rule=%q", authorization.RuleOwnPartition)
	if metricSum(t, srv, "kcp_cache_authorization_denials_total", rule) == 0 {
		t.Errorf("/metrics serves no denial counter with %s, after this test's own denial", rule)
	}
}

func scopedDyn(t *testing.T, cfg *rest.Config, shard, cluster string) *dynamic.DynamicClient {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: shard, Cluster: cluster})
	d, err := dynamic.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
