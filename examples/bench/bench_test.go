package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/managedfields"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
)

func ms2d(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", ms2d(7), 99, 7 * time.Millisecond},
		{"median of odd", ms2d(1, 2, 3), 50, 2 * time.Millisecond},
		{"median of even is the lower middle", ms2d(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p99 of 10 is the max", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"tiny p is the min", ms2d(1, 2, 3), 0.1, time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("%s: percentile(p%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestSummarizeSortsAndDoesNotModifyInput(t *testing.T) {
	in := ms2d(5, 1, 4, 2, 3)
	s := summarize(in)
	if s.N != 5 || s.Min != time.Millisecond || s.Max != 5*time.Millisecond || s.P50 != 3*time.Millisecond || s.Mean != 3*time.Millisecond {
		t.Errorf("summarize = %+v", s)
	}
	if in[0] != 5*time.Millisecond {
		t.Errorf("summarize reordered its input: %v", in)
	}
	if (summarize(nil) != summary{}) {
		t.Error("summarize(nil) should be zero")
	}
}

func TestRatioAndTarget(t *testing.T) {
	if !math.IsNaN(ratio(1, 0)) {
		t.Error("ratio by zero should be NaN")
	}
	if got := ratio(3, 2); got != 1.5 {
		t.Errorf("ratio(3, 2) = %v", got)
	}
	atMost := target{AtMost: true, Bound: 1.5}
	atLeast := target{Bound: 0.5}
	for _, tt := range []struct {
		t    target
		v    float64
		want bool
	}{
		{atMost, 1.5, true}, {atMost, 1.51, false}, {atMost, math.NaN(), false},
		{atLeast, 0.5, true}, {atLeast, 0.49, false}, {atLeast, math.NaN(), false},
	} {
		if got := tt.t.met(tt.v); got != tt.want {
			t.Errorf("%+v.met(%v) = %v, want %v", tt.t, tt.v, got, tt.want)
		}
	}
	if got := perSecond(10, 2*time.Second); got != 5 {
		t.Errorf("perSecond = %v", got)
	}
}

func TestLayoutSpreadsObjectsEvenly(t *testing.T) {
	l := layout{shards: 4, clusters: 25}
	if got := len(l.partitions()); got != 100 {
		t.Fatalf("%d partitions, want 100", got)
	}
	seen := map[kcpcache.Scope]bool{}
	for _, s := range l.partitions() {
		if err := s.Validate(); err != nil {
			t.Errorf("invalid scope %v: %v", s, err)
		}
		seen[s] = true
	}
	if len(seen) != 100 {
		t.Errorf("partitions repeat: %d distinct", len(seen))
	}
	const n = 10000
	for _, tt := range []struct {
		scope kcpcache.Scope
		want  int
	}{
		{kcpcache.Scope{Shard: "shard-0", Cluster: "cluster-00"}, 100},
		{kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: "cluster-00"}, 400},
		{kcpcache.Scope{Shard: "shard-0", Cluster: kcpcache.Wildcard}, 2500},
		{kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: kcpcache.Wildcard}, 10000},
	} {
		if got := l.countIn(n, tt.scope); got != tt.want {
			t.Errorf("countIn(%v) = %d, want %d", tt.scope, got, tt.want)
		}
	}
	if got, want := checkpoints(n, l), []int{100, 400, 1000, 2500, 10000}; !slices.Equal(got, want) {
		t.Errorf("checkpoints(10000) = %v, want %v", got, want)
	}
	if got, want := checkpoints(1000, l), []int{10, 40, 250, 1000}; !slices.Equal(got, want) {
		t.Errorf("checkpoints(1000) = %v, want %v", got, want)
	}
}

func TestAPIExportSpecHasTheRequestedSize(t *testing.T) {
	for _, size := range []int{1024, 2048} {
		spec, err := apiExportSpec("export-00042", size)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != size {
			t.Errorf("spec JSON is %d bytes, want %d", len(b), size)
		}
	}
	if got, want := etcdKey("/cache", kcpcache.Scope{Shard: "s", Cluster: "c"}, "x"), "/cache/apis.kcp.io/apiexports/s/c/x"; got != want {
		t.Errorf("etcdKey = %q, want %q", got, want)
	}
	if got, want := typeKeyPrefix("/cache", idleType), "/cache/apis.kcp.io/apiresourceschemas/"; got != want {
		t.Errorf("typeKeyPrefix = %q, want %q", got, want)
	}
}

func TestParseProcFiles(t *testing.T) {
	status := parseProcStatus([]byte("Name:\tbench\nVmRSS:\t  2048 kB\nRssAnon:\t1024 kB\nThreads:\t12\n"))
	if status["VmRSS"] != 2048*1024 || status["RssAnon"] != 1024*1024 {
		t.Errorf("parseProcStatus = %v", status)
	}
	if _, ok := status["Threads"]; ok {
		t.Error("fields without kB must be skipped")
	}
	total, idle, iowait := parseProcStatCPU("cpu  100 5 50 800 20 1 2 3 9 9")
	if total != 981 || idle != 800 || iowait != 20 {
		t.Errorf("parseProcStatCPU = %d %d %d", total, idle, iowait)
	}
	a := cpuSample{total: 0, idle: 0, iowait: 0, at: time.Unix(0, 0)}
	b := cpuSample{total: 200, idle: 100, iowait: 10, own: 500 * time.Millisecond, at: time.Unix(1, 0)}
	u := cpuBetween(a, b, 2)
	if math.Abs(u.Busy-0.45) > 1e-9 || math.Abs(u.Own-0.25) > 1e-9 || math.Abs(u.Others-0.20) > 1e-9 || math.Abs(u.IOWait-0.05) > 1e-9 {
		t.Errorf("cpuBetween = %+v", u)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP etcd_request_duration_seconds x
# TYPE etcd_request_duration_seconds histogram
etcd_request_duration_seconds_bucket{group="apis.kcp.io",operation="create",resource="apiexports",le="0.005"} 3
etcd_request_duration_seconds_sum{group="apis.kcp.io",operation="create",resource="apiexports"} 0.5
etcd_request_duration_seconds_count{group="apis.kcp.io",operation="create",resource="apiexports"} 10
etcd_request_duration_seconds_sum{group="apis.kcp.io",operation="get",resource="apiexports"} 9
weird_metric{label="a,b=\"c\""} 1e3
plain 2
`
	m := parseMetrics([]byte(text))
	match := map[string]string{"operation": "create", "resource": "apiexports"}
	if got := sumMetric(m, "etcd_request_duration_seconds_sum", match); got != 0.5 {
		t.Errorf("sum = %v", got)
	}
	if got := sumMetric(m, "weird_metric", map[string]string{"label": `a,b="c"`}); got != 1000 {
		t.Errorf("quoted label: %v", got)
	}
	if got := sumMetric(m, "plain", nil); got != 2 {
		t.Errorf("plain = %v", got)
	}
	var h histDelta
	h.add(nil, m, "etcd_request_duration_seconds", match)
	if got := h.mean(); got != 50*time.Millisecond {
		t.Errorf("mean = %v, want 50ms", got)
	}
	if (histDelta{}).mean() != 0 {
		t.Error("mean without observations should be 0")
	}
}

func TestRawWatchParsing(t *testing.T) {
	line := []byte(`{"type":"MODIFIED","object":{"spec":{"benchSentAt":123456789,"benchSeq":42,"x":1}}}`)
	if v, ok := intField(line, `"benchSeq":`); !ok || v != 42 {
		t.Errorf("benchSeq = %d, %v", v, ok)
	}
	if v, ok := intField(line, `"benchSentAt":`); !ok || v != 123456789 {
		t.Errorf("benchSentAt = %d, %v", v, ok)
	}
	if _, ok := intField(line, `"missing":`); ok {
		t.Error("a missing field must not parse")
	}
	st := &watcherState{seen: make([]bool, 50)}
	if !st.record(42, int64(time.Second), 3*time.Second) || len(st.latencies) != 1 || st.latencies[0] != 2*time.Second {
		t.Errorf("first delivery not recorded: %+v", st.latencies)
	}
	if st.record(42, 0, 0) || st.record(50, 0, 0) || st.record(-1, 0, 0) {
		t.Error("duplicates and out-of-range sequence numbers must be ignored")
	}
}

func TestClassifyStack(t *testing.T) {
	for _, tt := range []struct {
		funcs        []string
		origin, site string
	}{
		{[]string{"runtime.mallocgc", "go.etcd.io/raft/v3.(*raft).appendEntry", "k8s.io/apiserver/pkg/storage/cacher.x"}, "embedded etcd (server, raft, bbolt)", "go.etcd.io/raft/v3.(*raft).appendEntry"},
		{[]string{"runtime.makemap", "encoding/json.x", "k8s.io/apiserver/pkg/storage/etcd3.decodeObj"}, "etcd3 storage (decoding from etcd)", "k8s.io/apiserver/pkg/storage/etcd3.decodeObj"},
		{[]string{"runtime.makemap", "main.foo"}, otherOrigin, "main.foo"},
		{[]string{"runtime.makemap"}, otherOrigin, "?"},
	} {
		origin, site := classifyStack(tt.funcs)
		if origin != tt.origin || site != tt.site {
			t.Errorf("classifyStack(%v) = %q, %q; want %q, %q", tt.funcs, origin, site, tt.origin, tt.site)
		}
	}
}

func TestRowJSONWritesNaNAsNull(t *testing.T) {
	r := &row{ID: "x", Ratio: math.NaN(), Target: &target{AtMost: true, Bound: 1}}
	r.evaluate()
	if r.Met == nil || *r.Met {
		t.Errorf("a NaN ratio must not meet a target: %v", r.Met)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]interface{}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v, ok := back["ratio"]; !ok || v != nil {
		t.Errorf("ratio = %v (present %v), want null", v, ok)
	}
}

func TestQuickDefaultsYieldToExplicitFlags(t *testing.T) {
	c, err := parseFlags([]string{"-quick", "-objects", "3000"})
	if err != nil {
		t.Fatal(err)
	}
	if c.objects != 3000 || c.creates != 200 || c.listReps != 5 {
		t.Errorf("quick config = %+v", c)
	}
	if _, err := parseFlags([]string{"-profile-phase", "nope"}); err == nil {
		t.Error("an unknown profile phase must be refused")
	}
}

func TestPhasesFlag(t *testing.T) {
	c, err := parseFlags([]string{"-phases", "load, churn"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.phases["load"] || !c.phases["churn"] || c.phases["get"] || c.phases["create"] {
		t.Errorf("phases = %v, want load and churn", c.phases)
	}
	if all, err := parseFlags(nil); err != nil || len(all.phases) != len(phases)-5 || all.phases["storm"] || all.phases["regions"] || all.phases["relays"] || all.phases["scale"] || all.phases["restart"] {
		t.Errorf("default phases = %v (%v), want all of %v but storm, regions, relays, scale and restart", all.phases, err, phases)
	}
	for _, alone := range []string{"storm", "regions", "relays", "scale", "restart"} {
		if c, err := parseFlags([]string{"-phases", alone}); err != nil || len(c.phases) != 1 || !c.phases[alone] {
			t.Errorf("-phases %s = %v (%v)", alone, c.phases, err)
		}
	}
	for _, bad := range []string{"load,nope", "get", "watch,create", "load,scale", "relays,scale", "scale,restart"} {
		if _, err := parseFlags([]string{"-phases", bad}); err == nil {
			t.Errorf("-phases %s was accepted", bad)
		}
	}
}

// The managedFields of an owned export are those upstream's field manager
// accepts, name every spec field once across both managers, and round-trip
// through metav1.
func TestOwnedAPIExportManagedFields(t *testing.T) {
	u, err := ownedAPIExport("export-00042", 1024)
	if err != nil {
		t.Fatal(err)
	}
	mf := u.GetManagedFields()
	if len(mf) != 2 || mf[0].Manager != "kubectl-client-side-apply" || mf[1].Manager != "kcp" {
		t.Fatalf("managers = %+v", mf)
	}
	if err := managedfields.ValidateManagedFields(mf); err != nil {
		t.Fatalf("upstream refuses them: %v", err)
	}
	user, kcp := string(mf[0].FieldsV1.Raw), string(mf[1].FieldsV1.Raw)
	for _, want := range []string{`"f:description"`, `"f:maximalPermissionPolicy"`, `"v:\"v240903-2f3c1a1b.widgets.example.dev\""`, `"k:{\"group\":\"\",\"resource\":\"secrets\"}"`, `"f:identityHash"`} {
		if !strings.Contains(user, want) {
			t.Errorf("the user's fields lack %s: %s", want, user)
		}
	}
	if strings.Contains(user, `"f:identity"`) || !strings.Contains(kcp, `"f:secretRef"`) || strings.Contains(kcp, `"f:description"`) {
		t.Errorf("identity must be kcp's alone: user %s, kcp %s", user, kcp)
	}
}

func TestStormAndServerFlags(t *testing.T) {
	for _, bad := range [][]string{{"-storm-lists", "0"}, {"-storm-objects", "10"}, {"-storm-duration", "0s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
	c, err := parseFlags([]string{"-server-flag=--max-list-objects-in-flight=7", "-server-flag=--list-wait-timeout=3s"})
	if err != nil {
		t.Fatal(err)
	}
	o := options.NewOptions()
	if err := applyServerFlags(o, c.serverFlags); err != nil || o.Limits.MaxListObjectsInFlight != 7 || o.Limits.ListWaitTimeout != 3*time.Second {
		t.Errorf("server flags %v: %v, limits %+v", c.serverFlags, err, *o.Limits)
	}
	for _, bad := range []string{"--max-list-objects-in-flight=many", "--no-such-flag", "positional"} {
		if err := applyServerFlags(options.NewOptions(), []string{bad}); err == nil {
			t.Errorf("server flag %q was accepted", bad)
		}
	}
}

func TestRegionsFlags(t *testing.T) {
	for _, bad := range [][]string{{"-regions-objects", "0"}, {"-regions-interval", "0s"}, {"-regions-gets", "0"}, {"-regions-memory-objects", "10"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
	c, err := parseFlags([]string{"-phases", "regions", "-regions-objects", "20", "-regions-interval", "10ms", "-regions-gets", "30", "-regions-memory-objects", "400"})
	if err != nil {
		t.Fatal(err)
	}
	if c.regionsObjects != 20 || c.regionsInterval != 10*time.Millisecond || c.regionsGets != 30 || c.regionsMemoryObjects != 400 {
		t.Errorf("regions config = %+v", c)
	}
}

func TestRelaysFlags(t *testing.T) {
	for _, bad := range [][]string{{"-relays-objects", "0"}, {"-relays-interval", "0s"}, {"-relays-gets", "0"}, {"-relays-curated-objects", "99"}, {"-relays-curated-objects", "many"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
	c, err := parseFlags([]string{"-phases", "relays", "-relays-objects", "20", "-relays-interval", "10ms", "-relays-gets", "30", "-relays-curated-objects", "100"})
	if err != nil {
		t.Fatal(err)
	}
	if c.relaysObjects != 20 || c.relaysInterval != 10*time.Millisecond || c.relaysGets != 30 || c.relaysCuratedObjects != 100 {
		t.Errorf("relays config = %+v", c)
	}
	if d, err := parseFlags(nil); err != nil || d.relaysObjects != 300 || d.relaysInterval != 50*time.Millisecond || d.relaysGets != 300 || d.relaysCuratedObjects != 2000 {
		t.Errorf("relays defaults = %d, %v, %d, %d (%v); want 300, 50ms, 300, 2000", d.relaysObjects, d.relaysInterval, d.relaysGets, d.relaysCuratedObjects, err)
	}
}

// The chain peers each cache with its neighbours only, and its paths run
// hop by hop; the tree's streams are peers × types per cache, against a
// full mesh's six peers each.
func TestRelayGraphsAndStreams(t *testing.T) {
	chain := chainOf("home", "r1", "r2", "r3")
	for name, want := range map[string][]string{"home": {"r1"}, "r1": {"home", "r2"}, "r2": {"r1", "r3"}, "r3": {"r2"}} {
		if !slices.Equal(chain[name], want) {
			t.Errorf("%s peers %v, want %v", name, chain[name], want)
		}
	}
	if got, want := chain.path("r3", "home"), []string{"r3", "r2", "r1", "home"}; !slices.Equal(got, want) {
		t.Errorf("path r3 -> home = %v, want %v", got, want)
	}
	if got := graphOf([2]string{"a", "b"}, [2]string{"c", "d"}).path("a", "d"); got != nil {
		t.Errorf("a path between unconnected caches: %v", got)
	}
	tree, names := relayTree()
	if len(names) != 7 || len(tree) != 7 {
		t.Fatalf("the tree has %d names and %d caches, want 7", len(names), len(tree))
	}
	if got, want := tree.path("zone-b2", "zone-a1"), []string{"zone-b2", "region-b", "global", "region-a", "zone-a1"}; !slices.Equal(got, want) {
		t.Errorf("path zone-b2 -> zone-a1 = %v, want %v", got, want)
	}
	const types = 10
	f := tree.streamFigures(types)
	for name, want := range map[string]int{"global": 20, "region-a": 30, "region-b": 30, "zone-a1": 10, "zone-b2": 10} {
		if f.perCache[name] != want {
			t.Errorf("%s runs %d streams, want %d", name, f.perCache[name], want)
		}
	}
	if f.max != 30 || f.total != 120 {
		t.Errorf("tree: max %d, total %d streams; want 30, 120", f.max, f.total)
	}
	mesh := fullMeshOf(names...).streamFigures(types)
	if mesh.max != 60 || mesh.total != 420 || len(mesh.perCache) != 7 {
		t.Errorf("full mesh: max %d, total %d streams over %d caches; want 60, 420, 7", mesh.max, mesh.total, len(mesh.perCache))
	}
}

// Rows sort by their ID's number first: the regions' 10a..10e follow 9d;
// the scale phase's by size, then letter, the rows across sizes last.
func TestRowsSortByIDNumber(t *testing.T) {
	r := &report{}
	for _, id := range []string{"11t", "11b-250000", "10b", "11a-50000", "2a", "9d", "11b-50000", "10a", "1b", "11a-250000", "7a", "1a"} {
		r.Rows = append(r.Rows, &row{ID: id})
	}
	r.sortRows()
	var got []string
	for _, x := range r.Rows {
		got = append(got, x.ID)
	}
	if want := []string{"1a", "1b", "2a", "7a", "9d", "10a", "10b", "11a-50000", "11b-50000", "11a-250000", "11b-250000", "11t"}; !slices.Equal(got, want) {
		t.Errorf("sorted IDs = %v, want %v", got, want)
	}
}

func TestMarkdownTableHasOneRowPerMeasurement(t *testing.T) {
	r := &report{Command: "bench -phases storm", Environment: map[string]interface{}{"machine": "2 CPUs (test)"}}
	r.add(&row{ID: "9a", Metric: "  GET p99 | during", Cache: "12 ms", Baseline: "3 ms", Ratio: 4, Target: &target{Text: "≤ 100 ms", AtMost: true, Bound: 100}, TargetOnValue: true, CacheValue: 12, Note: "one\nnote"})
	r.add(&row{ID: "1a", Metric: "create", Cache: "500/s", Baseline: "-", Ratio: math.NaN()})
	var b strings.Builder
	if err := r.writeMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"`bench -phases storm` on 2 CPUs (test):\n",
		"| 1a | create | 500/s | - | – | – |  |\n",
		"| 9a | GET p99 \\| during | 12 ms | 3 ms | 4.00 | ≤ 100 ms | yes |\n",
		"- 9a: one note\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "| 1a"), strings.Index(out, "| 9a"); i < 0 || j < i {
		t.Errorf("rows not ordered by ID:\n%s", out)
	}
}

// The scale phase's sizes parse as object counts; anything else is refused.
func TestScaleFlags(t *testing.T) {
	c, err := parseFlags([]string{"-phases", "scale", "-sizes", "10000, 250000", "-scale-shards", "20"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.scaleSizes) != 2 || c.scaleSizes[0] != 10000 || c.scaleSizes[1] != 250000 || c.scaleInformers != 20 {
		t.Errorf("sizes %v, informers %d; want [10000 250000] and one informer per shard (20)", c.scaleSizes, c.scaleInformers)
	}
	m, err := parseFlags([]string{"-phases", "scale", "-scale-memory-only", "-scale-heapprofile", "/tmp/h"})
	if err != nil {
		t.Fatal(err)
	}
	if !m.scaleMemoryOnly || m.scaleHeapProfile != "/tmp/h" {
		t.Errorf("-scale-memory-only %v, -scale-heapprofile %q", m.scaleMemoryOnly, m.scaleHeapProfile)
	}
	for _, bad := range [][]string{{"-sizes", "10k"}, {"-sizes", "50"}, {"-scale-clusters", "0"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("%v was accepted", bad)
		}
	}
}

// Rows 11v and 11w say "not measured" when etcd's values could not be
// read, and 11w is the live heap over the stored bytes.
func TestScaleStoredBytesRows(t *testing.T) {
	measured := &scaleResult{heapPerObject: 3000, storedPerObject: 2000, listOverEtcd: math.NaN(), failedFrom: "b", failedHow: "not run"}
	unmeasured := &scaleResult{heapPerObject: 3000, storedPerObject: math.NaN(), listOverEtcd: math.NaN(), failedFrom: "b", failedHow: "not run"}
	for _, tc := range []struct {
		res        *scaleResult
		v, w       string
		wantTarget bool
	}{
		{res: measured, v: "2000 B", w: "1.50", wantTarget: true},
		{res: unmeasured, v: "not measured (see the notes)", w: "not measured (see the notes)"},
	} {
		rep := &report{}
		addScaleRows(rep, 50000, tc.res, nil)
		got := map[string]*row{}
		for _, r := range rep.Rows {
			got[r.ID] = r
		}
		v, w := got["11v-50000"], got["11w-50000"]
		if v == nil || w == nil {
			t.Fatalf("rows 11v and 11w missing: %v", got)
		}
		if v.Cache != tc.v || w.Cache != tc.w || (w.Target != nil) != tc.wantTarget {
			t.Errorf("11v %q, 11w %q (target %v); want %q, %q", v.Cache, w.Cache, w.Target, tc.v, tc.w)
		}
	}
}

// Issue 45's targets: RSS per object against kcp's in the same run (no
// more at 250,000, within twice at 50,000, unmet without kcp's figure),
// the restart at every size, the burst and a mirror's first copy at
// 250,000 only.
func TestScaleTargets(t *testing.T) {
	result := func(rss float64, ready time.Duration, mirrored bool) *scaleResult {
		r := &scaleResult{rssPerObj: rss, ready: ready, burstSynced: 70 * time.Second, burstGets: summary{N: 95, P99: 80 * time.Millisecond}, listOverEtcd: math.NaN(), storedPerObject: math.NaN()}
		if mirrored {
			r.mirror = &scaleMirrorResult{copies: 10, firstSync: 80 * time.Second}
		}
		return r
	}
	met := func(rep *report, id string) string {
		for _, r := range rep.Rows {
			if r.ID == id {
				// As the report renders it: no evaluation here.
				if r.Met == nil {
					return "none"
				}
				return strconv.FormatBool(*r.Met)
			}
		}
		return "missing"
	}
	for _, tc := range []struct {
		name      string
		n         int
		ours, kcp *scaleResult
		want      map[string]string
	}{
		{"250,000, ours above kcp's", 250000, result(7000, 4*time.Second, true), result(6000, 4*time.Second, false),
			map[string]string{"11e": "false", "11b": "true", "11h": "false", "11n": "false"}},
		{"250,000, ours below kcp's", 250000, result(5000, 6*time.Second, false), result(6000, 4*time.Second, false),
			map[string]string{"11e": "true", "11b": "false", "11n": "none"}},
		{"250,000 without kcp's", 250000, result(5000, 4*time.Second, false), nil,
			map[string]string{"11e": "false"}},
		{"50,000 within twice kcp's", 50000, result(5000, 4*time.Second, true), result(3000, 2*time.Second, false),
			map[string]string{"11e": "true", "11h": "none", "11n": "none"}},
		{"50,000 beyond twice kcp's", 50000, result(7000, 4*time.Second, false), result(3000, 2*time.Second, false),
			map[string]string{"11e": "false"}},
		{"10,000", 10000, result(7000, 4*time.Second, false), result(3000, 2*time.Second, false),
			map[string]string{"11e": "none"}},
	} {
		rep := &report{}
		addScaleRows(rep, tc.n, tc.ours, tc.kcp)
		for _, r := range rep.Rows {
			if r.ID == fmt.Sprintf("11i-%d", tc.n) && (!r.Indicative || r.Cache != "80.0 ms (of 95 GETs)") {
				t.Errorf("%s: row 11i %q, indicative %v; want the count of GETs and indicative (95 of them)", tc.name, r.Cache, r.Indicative)
			}
		}
		for letter, want := range tc.want {
			if got := met(rep, fmt.Sprintf("%s-%d", letter, tc.n)); got != want {
				t.Errorf("%s: row %s met %s, want %s", tc.name, letter, got, want)
			}
		}
	}
}

// The scale data set has kcp's mix: the shares add up to a hundred, and
// every object carries its type's version in its managedFields.
func TestScaleMix(t *testing.T) {
	total := 0
	for _, m := range scaleMix {
		total += m.share
	}
	if total != 100 {
		t.Fatalf("the shares add up to %d, want 100", total)
	}
	counts := map[string]int{}
	for i := range 1000 {
		u, err := scaleObject(i, kcpcache.Scope{Shard: "s", Cluster: "c"}, 512)
		if err != nil {
			t.Fatal(err)
		}
		tp := scaleTypeOf(i)
		counts[tp.gvr.Resource]++
		if u.GetKind() != tp.kind || u.GetAPIVersion() != tp.gvr.GroupVersion().String() {
			t.Errorf("object %d is %s %s, want %s %s", i, u.GetAPIVersion(), u.GetKind(), tp.gvr.GroupVersion(), tp.kind)
		}
		for _, mf := range u.GetManagedFields() {
			if mf.APIVersion != tp.gvr.GroupVersion().String() {
				t.Errorf("object %d: a manager of %s", i, mf.APIVersion)
			}
		}
	}
	for _, m := range scaleMix {
		if counts[m.gvr.Resource] != m.share*10 {
			t.Errorf("%s: %d of 1000, want %d", m.gvr.Resource, counts[m.gvr.Resource], m.share*10)
		}
	}
}

// A server that fails the relist burst keeps the rows measured before it,
// 11m among them (measured before the burst); 11m without a figure is not
// measured whatever the burst did.
func TestScaleRowsMeasured(t *testing.T) {
	r := &scaleResult{failedFrom: "h", listOverEtcd: 1.2}
	for _, l := range []string{"a", "f", "g", "m"} {
		if !r.measured(l) {
			t.Errorf("row 11%s reads as not measured after a failed burst", l)
		}
	}
	for _, l := range []string{"h", "i", "l"} {
		if r.measured(l) {
			t.Errorf("row 11%s reads as measured after a failed burst", l)
		}
	}
	r = &scaleResult{listOverEtcd: math.NaN()}
	if r.measured("m") || !r.measured("l") {
		t.Errorf("without an etcd range, 11m reads as measured (%v) or 11l as not (%v)", r.measured("m"), r.measured("l"))
	}
}

// A server that fails earlier keeps only the rows it measured before, in
// the order it measures them (memory at rest before the restart), and the
// rows after say how it failed; the mirror's rows without a mirror are
// not run.
func TestScaleRowsAfterAnEarlyFailure(t *testing.T) {
	r := &scaleResult{failedFrom: "b", failedHow: "killed (6Gi memory limit)", listOverEtcd: math.NaN()}
	for _, l := range []string{"a", "d", "e"} {
		if !r.measured(l) {
			t.Errorf("row 11%s reads as not measured after a failed restart", l)
		}
	}
	for _, l := range []string{"b", "c", "f", "m", "h", "n", "r"} {
		if r.measured(l) {
			t.Errorf("row 11%s reads as measured after a failed restart", l)
		}
		if got := r.unmeasured(l); got != r.failedHow {
			t.Errorf("row 11%s says %q, want %q", l, got, r.failedHow)
		}
	}
	ok := &scaleResult{listOverEtcd: 1}
	if ok.measured("n") || ok.unmeasured("n") != "not run" {
		t.Errorf("without a mirror, row 11n reads as measured (%v) or says %q", ok.measured("n"), ok.unmeasured("n"))
	}
	ok.mirror = &scaleMirrorResult{}
	if !ok.measured("n") {
		t.Error("with a mirror, row 11n reads as not measured")
	}
}

// The memory limit's OOM-kill counter is read from either hierarchy's file.
func TestMemoryLimitCountsOOMKills(t *testing.T) {
	for _, tc := range []struct {
		v2         bool
		file, body string
	}{
		{false, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"},
		{true, "memory.events", "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n"},
	} {
		m := &memoryLimit{dir: t.TempDir(), v2: tc.v2, bytes: 6 << 30}
		if got := m.oomKills(); got != 0 {
			t.Errorf("v2=%v: %d kills before the file exists", tc.v2, got)
		}
		if err := os.WriteFile(filepath.Join(m.dir, tc.file), []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := m.oomKills(); got != 2 {
			t.Errorf("v2=%v: %d kills, want 2", tc.v2, got)
		}
		if m.String() != "6Gi memory limit" {
			t.Errorf("the limit reads %q", m.String())
		}
	}
	if _, err := parseFlags([]string{"-phases", "scale", "-scale-memory-limit", "six"}); err == nil {
		t.Error("-scale-memory-limit six was accepted")
	}
}

// The curated measurement's region passes on to global only the first of
// its two types, as the cache server parses --pass-on.
func TestCuratedPassOn(t *testing.T) {
	o := options.NewOptions()
	o.Hierarchy.PassOn = curatedPassOn()
	got, err := o.Hierarchy.PassOnResources()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"apiexports.apis.kcp.io"}; len(got) != 1 || !slices.Equal(got[curatedGlobal], want) {
		t.Errorf("--pass-on %v parses as %v, want %s=%v", o.Hierarchy.PassOn, got, curatedGlobal, want)
	}
	if len(curatedTypes) != 2 || curatedTypes[1].gvr != idleType {
		t.Errorf("curated types %v, want apiexports and %s", curatedTypes, idleType.Resource)
	}
	h := curatedHeld{listed: map[string]int{"apiexports.apis.kcp.io": 20}, stored: map[string]int64{"apiexports.apis.kcp.io": 20}}
	if h.total() != 20 || storedText(h) != "apiexports 20, apiresourceschemas 0" {
		t.Errorf("held %d, stored %q", h.total(), storedText(h))
	}
}

func TestTLSLoopbackMovesTheBytesAskedWithTheSuiteAsked(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ version, suite uint16 }{
		{tls.VersionTLS13, tls.TLS_AES_128_GCM_SHA256},
		{tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256},
	} {
		lb, err := newTLSLoopback(ctx, c.version, c.suite, []byte("payload"))
		if err != nil {
			t.Fatalf("%s: %v", tls.CipherSuiteName(c.suite), err)
		}
		for _, n := range []int{1, 7, 100 << 10} {
			if err := lb.transfer(n); err != nil {
				t.Errorf("%s, %d bytes: %v", lb.suite, n, err)
			}
		}
		if err := lb.close(); err != nil {
			t.Errorf("%s: the server: %v", lb.suite, err)
		}
	}
}
