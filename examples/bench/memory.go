package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
)

// memProfileRate samples one allocation per 64 KiB (Go's default is 512 KiB)
// so that the heap breakdown by origin has enough samples. It is set during
// package initialisation, before the server allocates anything.
const memProfileRate = 64 << 10

var _ = func() int { runtime.MemProfileRate = memProfileRate; return 0 }()

// memSnapshot is the process's memory after a full collection.
type memSnapshot struct {
	HeapAlloc uint64 `json:"heap_alloc_bytes"`
	HeapSys   uint64 `json:"heap_sys_bytes"`
	VmRSS     uint64 `json:"vm_rss_bytes"`
	RssAnon   uint64 `json:"rss_anon_bytes"`
	RssFile   uint64 `json:"rss_file_bytes"`
	// ByOrigin estimates live heap bytes by who allocated them, from the
	// sampled heap profile (see classifyStack).
	ByOrigin map[string]float64 `json:"by_origin_bytes"`
	// BySite estimates live heap bytes by allocation site (origin: function).
	BySite map[string]float64 `json:"-"`
}

func takeMemSnapshot() (memSnapshot, error) {
	// Two cycles: the heap profile describes the heap as of the last
	// completed cycle, and finalizers may free more in the second.
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSnapshot{HeapAlloc: ms.HeapAlloc, HeapSys: ms.HeapSys}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s, err
	}
	fields := parseProcStatus(status)
	s.VmRSS, s.RssAnon, s.RssFile = fields["VmRSS"], fields["RssAnon"], fields["RssFile"]
	s.ByOrigin, s.BySite = heapByOrigin()
	return s, nil
}

// parseProcStatus reads the "kB" fields of /proc/<pid>/status, in bytes.
func parseProcStatus(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		out[name] = v * 1024
	}
	return out
}

// origins, in priority order: the first whose package prefix appears
// anywhere in an allocation's stack claims it.
var origins = []struct{ name, prefix string }{
	{"embedded etcd (server, raft, bbolt)", "go.etcd.io/etcd/server/"},
	{"embedded etcd (server, raft, bbolt)", "go.etcd.io/raft/"},
	{"embedded etcd (server, raft, bbolt)", "go.etcd.io/bbolt"},
	{"watch cache (apiserver storage/cacher)", "k8s.io/apiserver/pkg/storage/cacher"},
	{"etcd3 storage (decoding from etcd)", "k8s.io/apiserver/pkg/storage/etcd3"},
	{"kcp-cache code", "github.com/kcp-cache/"},
	{"etcd client / gRPC", "go.etcd.io/etcd/client/"},
	{"etcd client / gRPC", "google.golang.org/grpc"},
}

const otherOrigin = "other"

// classifyStack names the origin of an allocation and its site: the
// innermost frame of the origin's package (or the innermost non-runtime
// frame).
func classifyStack(funcs []string) (origin, site string) {
	for _, o := range origins {
		for _, f := range funcs {
			if strings.HasPrefix(f, o.prefix) {
				return o.name, f
			}
		}
	}
	for _, f := range funcs {
		if !strings.HasPrefix(f, "runtime.") {
			return otherOrigin, f
		}
	}
	return otherOrigin, "?"
}

// heapByOrigin estimates live heap bytes per origin and per site from the
// runtime's sampled heap profile, scaled the way pprof scales it.
func heapByOrigin() (map[string]float64, map[string]float64) {
	var records []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		records = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		n, ok = runtime.MemProfile(records, true)
		if ok {
			records = records[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	byOrigin, bySite := map[string]float64{}, map[string]float64{}
	for _, r := range records {
		if r.InUseBytes() <= 0 || r.AllocObjects == 0 {
			continue
		}
		avg := float64(r.AllocBytes) / float64(r.AllocObjects)
		scale := 1 / (1 - math.Exp(-avg/rate))
		var funcs []string
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			funcs = append(funcs, f.Function)
			if !more {
				break
			}
		}
		origin, site := classifyStack(funcs)
		est := float64(r.InUseBytes()) * scale
		byOrigin[origin] += est
		bySite[origin+": "+site] += est
	}
	return byOrigin, bySite
}

// siteDelta is the growth of one allocation site between two snapshots.
type siteDelta struct {
	Site  string  `json:"site"`
	Bytes float64 `json:"bytes"`
}

// topGrowth lists the sites that grew most from before to after.
func topGrowth(before, after map[string]float64, n int) []siteDelta {
	var out []siteDelta
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out = append(out, siteDelta{Site: k, Bytes: d})
		}
	}
	sortDeltas(out)
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }

// sortDeltas orders by growth, largest first.
func sortDeltas(d []siteDelta) {
	sort.Slice(d, func(i, j int) bool { return d[i].Bytes > d[j].Bytes })
}
