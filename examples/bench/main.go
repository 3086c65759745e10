// Command bench measures a kcp cache server against raw etcd in the same run.
//
// It starts a cache server in this process the way examples/cache-server
// does (embedded etcd with fsync, watch cache on, etcd prefix /cache; only
// the ports are free loopback ports and the root directory is temporary),
// loads APIExport-like objects of about 1 KB spread over shards × clusters,
// and prints a table of throughput, latency and memory, each next to a
// baseline measured in the same run (usually raw etcd with clientv3 against
// the same etcd member) and checked against the targets of issue 6:
//
//	go run ./examples/bench           # full run: 10,000 objects, 100 watchers
//	go run ./examples/bench -quick    # under a minute on 2 cores
//	go run ./examples/bench -json     # machine-readable
//	go run ./examples/bench -cpuprofile cpu.out -profile-phase list
//	go run ./examples/bench -phases load -managed-fields   # memory with kcp-like managedFields
//
// All traffic stays on loopback; every loop is bounded in count and time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

type config struct {
	objects         int
	shards          int
	clusters        int
	objectBytes     int
	loadConcurrency int
	creates         int
	gets            int
	listReps        int
	watchers        int
	watchSharedConn bool
	rate            int
	duration        time.Duration
	quick           bool
	jsonOut         bool
	jsonFile        string
	markdownOut     bool
	cpuProfile      string
	profilePhase    string
	memProfile      string
	blockProfile    string
	mutexProfile    string
	phaseTimeout    time.Duration
	churnObjects    int
	churnIdle       time.Duration
	seed            int64
	serverLogs      bool
	managedFields   bool
	// The storm phase's sizes (see listStorm).
	stormObjects  int
	stormLists    int
	stormDuration time.Duration
	stormGetsFor  time.Duration
	stormAfter    time.Duration
	// stormFreshTLS makes every storm LIST dial and handshake a new TLS
	// connection, as a fleet of short-lived clients (kubectl, scripts, new
	// pods) does, rather than reuse one per client.
	stormFreshTLS bool
	// stormHeapProfile is where a heap profile taken three quarters into
	// the storm is written (what is live while it runs), if set.
	stormHeapProfile string
	// stormServerBinary runs the storm against a cache-server process of
	// its own, so that the RSS figures are the server's alone, not the
	// server's with the storm's 200 clients in the same process.
	stormServerBinary string
	// The regions phase's sizes (see regions).
	regionsObjects       int
	regionsInterval      time.Duration
	regionsGets          int
	regionsMemoryObjects int
	// The relays phase's sizes (see relays).
	relaysObjects  int
	relaysInterval time.Duration
	relaysGets     int
	// relaysCuratedObjects are the objects of each of two types the
	// relays phase's curated-promotion memory measurement loads at its
	// region (see curated.go).
	relaysCuratedObjects int
	// The scale phase's sizes and servers (see scale.go).
	scaleSizes        []int
	scaleShards       int
	scaleClusters     int
	scaleInformers    int
	scaleServerBinary string
	kcpCacheServer    string
	scaleMemoryLimit  int64
	scaleMirror       bool
	scaleSkip         map[string]bool
	scaleServerArgs   []string
	// scaleHeapProfile is the path prefix of a heap profile of our server
	// once loaded; scaleMemoryOnly ends each size after its memory rows.
	scaleHeapProfile string
	// scaleCPUProfile is the path prefix of CPU profiles of our server in
	// the scale phase: its restart's first seconds and its mirror's first
	// seconds of copying, at each size.
	scaleCPUProfile string
	scaleMemoryOnly bool
	// The restart phase's builds and repetitions (see restart.go).
	restartBinaries       []string
	restartReps           int
	restartCPUProfile     string
	restartProfileSeconds int
	// serverFlags are cache server flags (--name=value) for the server
	// under test.
	serverFlags []string
	// phases are the phases to run; get, scoped and watch need load's data.
	phases map[string]bool
}

var phases = []string{"load", "get", "scoped", "watch", "create", "churn", "storm", "regions", "relays", "scale", "restart"}

// defaultPhases leave the storm, the regions, the relays, the scale and the restart
// phase out: each takes minutes of its own (the storm mostly waiting for
// memory to come back, the regions starting two more servers and a
// mirror's initial sync, the relays a chain of four, the scale phase
// loading up to a quarter of a million objects into server processes of
// its own; the restart phase likewise) and is run alone, -phases storm,
// regions, relays, scale or restart.
var defaultPhases = phases[:len(phases)-5]

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&c.objects, "objects", 10000, "objects in the data set (LISTs at 1,000 and at this size; GETs, scoped LISTs and memory at this size)")
	fs.IntVar(&c.shards, "shards", 4, "shards the data set is spread over")
	fs.IntVar(&c.clusters, "clusters", 25, "logical clusters per shard")
	fs.IntVar(&c.objectBytes, "object-bytes", 1024, "size of each object's spec, in bytes of JSON")
	fs.IntVar(&c.loadConcurrency, "load-concurrency", 8, "concurrent clients loading the data set")
	fs.IntVar(&c.creates, "creates", 1000, "objects created per concurrency level (1 and 8) in the create-throughput phase, through the cache and as raw etcd puts each")
	fs.IntVar(&c.gets, "gets", 1000, "GETs by name of each kind (resourceVersion=0, consistent, raw etcd)")
	fs.IntVar(&c.listReps, "list-reps", 15, "repetitions of each LIST and etcd range")
	fs.IntVar(&c.watchers, "watchers", 100, "concurrent */* watchers")
	fs.BoolVar(&c.watchSharedConn, "watch-shared-conn", false, "let all watchers share one HTTP/2 connection (default: one connection each, like separate shards)")
	fs.IntVar(&c.rate, "rate", 200, "updates per second during the watch phase")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long the watch-phase writer runs")
	fs.BoolVar(&c.quick, "quick", false, "small sizes that finish in under a minute (explicit flags still win)")
	fs.BoolVar(&c.jsonOut, "json", false, "print JSON instead of a table")
	fs.StringVar(&c.jsonFile, "json-file", "", "also write the report as JSON to this file (e.g. for hack/perf/perfplot, which draws the scale phase's curves)")
	fs.BoolVar(&c.markdownOut, "markdown", false, "print the machine and the table in Markdown, as docs/performance.md shows them")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile (server and clients, one process) to this file")
	fs.StringVar(&c.profilePhase, "profile-phase", "all", "phase the CPU profile covers: all, "+strings.Join(phases, ", "))
	fs.StringVar(&c.memProfile, "memprofile", "", "write a heap profile to this file after loading the data set")
	fs.StringVar(&c.blockProfile, "blockprofile", "", "write a goroutine blocking profile of -profile-phase to this file")
	fs.StringVar(&c.mutexProfile, "mutexprofile", "", "write a mutex contention profile of -profile-phase to this file")
	fs.DurationVar(&c.phaseTimeout, "phase-timeout", 10*time.Minute, "upper bound on each phase")
	fs.IntVar(&c.churnObjects, "churn-objects", 50000, "objects created and deleted again in the churn phase (0 skips it)")
	fs.DurationVar(&c.churnIdle, "churn-idle", 2*time.Minute, "how long the churn phase idles after deleting before measuring memory")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the random GET order")
	fs.BoolVar(&c.serverLogs, "server-logs", false, "show the server's info logs on stderr (default: errors only)")
	fs.BoolVar(&c.managedFields, "managed-fields", false, "give every object the managedFields a kcp shard records for it (two entries, about 1.2 KB), as kcp's copies carry them")
	fs.IntVar(&c.stormObjects, "storm-objects", 5000, "objects the storm phase loads when it runs without load (with load, it lists load's -objects)")
	fs.IntVar(&c.stormLists, "storm-lists", 200, "concurrent clients running consistent */* LISTs back to back in the storm phase")
	fs.DurationVar(&c.stormDuration, "storm-duration", 20*time.Second, "how long the storm runs (and GETs are measured during it)")
	fs.DurationVar(&c.stormGetsFor, "storm-gets-for", 5*time.Second, "how long GETs are measured alone before the storm")
	fs.DurationVar(&c.stormAfter, "storm-after", time.Minute, "how long after the storm the RSS is measured again")
	fs.StringVar(&c.stormServerBinary, "storm-server-binary", "", "run the storm against this cache-server binary in a process of its own (its RSS alone in rows 9b/9c; -server-flag values are passed to it), instead of the server in the bench's process")
	fs.StringVar(&c.stormHeapProfile, "storm-heapprofile", "", "write a heap profile (live objects as of the last collection) taken three quarters into the storm to this file")
	fs.BoolVar(&c.stormFreshTLS, "storm-fresh-tls", true, "every storm LIST on a new TLS connection (a handshake each); false keeps one connection per lister")
	fs.IntVar(&c.regionsObjects, "regions-objects", 300, "objects a shard creates at the home cache, one at a time, in the regions phase's propagation measurement (their GETs follow)")
	fs.DurationVar(&c.regionsInterval, "regions-interval", 50*time.Millisecond, "pace of the regions phase's creates (one per interval)")
	fs.IntVar(&c.regionsGets, "regions-gets", 300, "GETs of each kind in the regions phase (consistent at the mirror, consistent at the home, resourceVersion=0 at the mirror)")
	fs.IntVar(&c.regionsMemoryObjects, "regions-memory-objects", 5000, "objects loaded at the home and then mirrored for the regions phase's memory per object")
	fs.IntVar(&c.relaysObjects, "relays-objects", 300, "objects a shard creates at the home of the relays phase's chain, one at a time, while a watch at each cache records when each appears (their GETs follow)")
	fs.DurationVar(&c.relaysInterval, "relays-interval", 50*time.Millisecond, "pace of the relays phase's creates (one per interval)")
	fs.IntVar(&c.relaysGets, "relays-gets", 300, "reads of each kind in the relays phase (consistent GETs at each cache of the chain, resourceVersion=0 GETs at each mirror, the revision question at each cache on the path)")
	fs.IntVar(&c.relaysCuratedObjects, "relays-curated-objects", 2000, "objects of each of two types (apiexports, apiresourceschemas) loaded at a region for the relays phase's memory of an upstream global cache that holds everything against one the region passes on only apiexports to (--pass-on)")
	sizes := fs.String("sizes", "10000,50000,250000", "object counts the scale phase measures, each in fresh server processes")
	fs.IntVar(&c.scaleShards, "scale-shards", 200, "shards the scale phase's data set is spread over (one informer each in its relist burst)")
	fs.IntVar(&c.scaleClusters, "scale-clusters", 50, "logical clusters per shard in the scale phase")
	fs.StringVar(&c.scaleServerBinary, "scale-server-binary", "", "our cache-server binary for the scale phase (CGO_ENABLED=0 go build -o /tmp/kcp-cache-server ./examples/cache-server)")
	fs.StringVar(&c.kcpCacheServer, "kcp-cache-server", "", "kcp's cache-server binary, measured beside ours in the scale phase (built from kcp's ./cmd/cache-server)")
	memoryLimit := fs.String("scale-memory-limit", "", "a memory limit (e.g. 6Gi) for each server process of the scale phase, in a memory cgroup of its own, so that a server that outgrows it is killed alone and its rows say so")
	serverArgs := fs.String("scale-server-args", "", "more arguments for our server in the scale phase, comma-separated (e.g. --max-list-objects-in-flight=0); the phase gives it --profiler-address itself, to measure its live heap")
	skip := fs.String("scale-skip", "", "servers the scale phase leaves out: ours, kcp (e.g. to measure kcp's cache-server at one size alone)")
	fs.StringVar(&c.scaleCPUProfile, "scale-cpuprofile", "", "path prefix of CPU profiles of our server in the scale phase, at each size: its restart's first 8 s (<prefix>-restart-<n>.pprof) and 30 s of its mirror's copying from a third of the objects on (<prefix>-mirror-<n>.pprof)")
	fs.StringVar(&c.scaleHeapProfile, "scale-heapprofile", "", "path prefix of a heap profile (live objects after a forced collection) of each server once loaded, at each size (ours: <prefix>-<n>.pb.gz; kcp's: <prefix>-kcp-<n>.pb.gz)")
	fs.StringVar(&scaleServerLog, "scale-server-log", "", "path prefix of a file per server of the scale phase that gets its whole log (<prefix>-ours.log, <prefix>-kcp.log), e.g. with -scale-server-args=--v=2")
	fs.BoolVar(&c.scaleMemoryOnly, "scale-memory-only", false, "end each size of the scale phase after its memory rows (11a, 11d, 11e, 11v, 11w): no restart, LISTs, burst or mirror")
	fs.BoolVar(&c.scaleMirror, "scale-mirror", true, "measure a mirror of our server at each size in the scale phase (rows 11n-11s)")
	fs.Func("server-flag", "a flag of the cache server under test, as --name=value (repeatable), e.g. -server-flag=--max-list-objects-in-flight=0", func(v string) error {
		c.serverFlags = append(c.serverFlags, v)
		return nil
	})
	restartBinaries := fs.String("restart-binaries", "", "builds of our cache-server the restart phase starts in turn on one data set, comma-separated: the first is the baseline, the last the change the rows compare with it (default: -scale-server-binary alone)")
	fs.IntVar(&c.restartReps, "restart-reps", 3, "restarts of each binary in the restart phase")
	fs.StringVar(&c.restartCPUProfile, "restart-cpuprofile", "", "path prefix of a CPU profile of each restart's first -restart-profile-seconds (<prefix>-<binary>-<rep>.pprof)")
	fs.IntVar(&c.restartProfileSeconds, "restart-profile-seconds", 5, "seconds of each restart the restart phase's CPU profiles cover")
	phaseList := fs.String("phases", strings.Join(defaultPhases, ","), "comma-separated phases to run, of "+strings.Join(phases, ", ")+" (get, scoped and watch need load)")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(klogFlags.Lookup("v").Value, "v", "server log verbosity (with -server-logs)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]func(){
			"objects":       func() { c.objects = 2000 },
			"creates":       func() { c.creates = 200 },
			"gets":          func() { c.gets = 200 },
			"list-reps":     func() { c.listReps = 5 },
			"duration":      func() { c.duration = 2 * time.Second },
			"churn-objects": func() { c.churnObjects = 5000 },
			"churn-idle":    func() { c.churnIdle = 10 * time.Second },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	threshold := "ERROR"
	if c.serverLogs {
		threshold = "INFO"
	}
	for k, v := range map[string]string{"logtostderr": "true", "legacy_stderr_threshold_behavior": "false", "stderrthreshold": threshold} {
		if err := klogFlags.Set(k, v); err != nil {
			return c, err
		}
	}
	switch {
	case c.objects < 100 || c.shards < 1 || c.clusters < 1:
		return c, fmt.Errorf("-objects must be at least 100 and -shards, -clusters at least 1")
	case c.creates < 8 || c.gets < 1 || c.listReps < 1 || c.watchers < 1 || c.rate < 1 || c.duration <= 0:
		return c, fmt.Errorf("-creates must be at least 8; -gets, -list-reps, -watchers, -rate and -duration must be positive")
	case c.loadConcurrency < 1:
		return c, fmt.Errorf("-load-concurrency must be positive")
	case c.stormObjects < 100 || c.stormLists < 1 || c.stormDuration <= 0 || c.stormGetsFor <= 0 || c.stormAfter < 0:
		return c, fmt.Errorf("-storm-objects must be at least 100, -storm-lists, -storm-duration and -storm-gets-for positive, -storm-after not negative")
	case c.regionsObjects < 1 || c.regionsInterval <= 0 || c.regionsGets < 1 || c.regionsMemoryObjects < 100:
		return c, fmt.Errorf("-regions-objects, -regions-interval and -regions-gets must be positive, -regions-memory-objects at least 100")
	case c.relaysObjects < 1 || c.relaysInterval <= 0 || c.relaysGets < 1 || c.relaysCuratedObjects < 100:
		return c, fmt.Errorf("-relays-objects, -relays-interval and -relays-gets must be positive, -relays-curated-objects at least 100")
	}
	c.scaleInformers = c.scaleShards
	if *serverArgs != "" {
		c.scaleServerArgs = strings.Split(*serverArgs, ",")
	}
	c.scaleSkip = map[string]bool{}
	for _, name := range strings.Split(*skip, ",") {
		switch name = strings.TrimSpace(name); name {
		case "":
		case "ours", "kcp":
			c.scaleSkip[name] = true
		default:
			return c, fmt.Errorf("-scale-skip: %q is neither ours nor kcp", name)
		}
	}
	if *memoryLimit != "" {
		q, err := resource.ParseQuantity(*memoryLimit)
		if err != nil {
			return c, fmt.Errorf("-scale-memory-limit: %w", err)
		}
		c.scaleMemoryLimit = q.Value()
	}
	for _, v := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 100 {
			return c, fmt.Errorf("-sizes: %q is not an object count of at least 100", v)
		}
		c.scaleSizes = append(c.scaleSizes, n)
	}
	if c.scaleShards < 1 || c.scaleClusters < 1 {
		return c, fmt.Errorf("-scale-shards and -scale-clusters must be positive")
	}
	c.restartBinaries = parseBinaries(*restartBinaries)
	if c.restartReps < 1 || c.restartProfileSeconds < 1 {
		return c, fmt.Errorf("-restart-reps and -restart-profile-seconds must be positive")
	}
	c.phases = map[string]bool{}
	for _, p := range strings.Split(*phaseList, ",") {
		if p = strings.TrimSpace(p); !contains(phases, p) {
			return c, fmt.Errorf("-phases: unknown phase %q; phases are %v", p, phases)
		}
		c.phases[p] = true
	}
	if (c.phases["scale"] || c.phases["restart"]) && len(c.phases) > 1 {
		return c, fmt.Errorf("-phases: scale and restart run alone (they start server processes of their own)")
	}
	for _, p := range []string{"get", "scoped", "watch"} {
		if c.phases[p] && !c.phases["load"] {
			return c, fmt.Errorf("-phases: %s needs load", p)
		}
	}
	if c.profilePhase != "all" && !contains(phases, c.profilePhase) {
		return c, fmt.Errorf("-profile-phase must be all or one of %v", phases)
	}
	return c, nil
}

// phaseNames lists the selected phases in run order.
func phaseNames(selected map[string]bool) []string {
	var out []string
	for _, p := range phases {
		if selected[p] {
			out = append(out, p)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

func run(cfg config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := newReport(cfg)
	if cfg.phases["scale"] || cfg.phases["restart"] {
		// The scale and restart phases run their servers as processes of
		// their own.
		started := time.Now()
		run := runScale
		if cfg.phases["restart"] {
			run = runRestart
		}
		err := run(ctx, cfg, rep)
		rep.Environment["load_average_end"] = loadAverage()
		rep.Environment["total_duration"] = time.Since(started).Round(time.Second).String()
		return printReport(cfg, rep, err)
	}

	var profile *os.File
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		profile = f
	}

	root, err := os.MkdirTemp("", "kcp-cache-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(root)

	progress("starting the cache server (embedded etcd with fsync) under %s", root)
	started := time.Now()
	srv, err := startServer(ctx, root, cfg.serverFlags)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the server:", err)
		}
	}()
	rep.Environment["server_ready_after"] = time.Since(started).Round(time.Millisecond).String()

	b, err := newBench(cfg, srv, rep, profile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	runErr := b.run(ctx)
	rep.Environment["load_average_end"] = loadAverage()
	rep.Environment["total_duration"] = time.Since(started).Round(time.Second).String()

	return printReport(cfg, rep, runErr)
}

// printReport prints rep as cfg asks and returns the exit code.
func printReport(cfg config, rep *report, runErr error) int {
	if runErr != nil {
		rep.Errors = append(rep.Errors, runErr.Error())
	}
	out := rep.writeTable
	switch {
	case cfg.jsonOut:
		out = rep.writeJSON
	case cfg.markdownOut:
		out = rep.writeMarkdown
	}
	if err := out(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cfg.jsonFile != "" {
		if err := writeJSONFile(cfg.jsonFile, rep); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "benchmark failed:", runErr)
		return 1
	}
	return 0
}

func newReport(cfg config) *report {
	cmd := "go run ./examples/bench"
	if len(os.Args) > 1 {
		cmd += " " + strings.Join(os.Args[1:], " ")
	}
	return &report{
		Command: cmd,
		Parameters: map[string]interface{}{
			"objects": cfg.objects, "shards": cfg.shards, "clusters": cfg.clusters,
			"object_spec_bytes": cfg.objectBytes, "load_concurrency": cfg.loadConcurrency,
			"creates_per_level": cfg.creates, "gets": cfg.gets, "list_reps": cfg.listReps,
			"watchers": cfg.watchers, "watch_shared_conn": cfg.watchSharedConn,
			"rate_per_s": cfg.rate, "duration": cfg.duration.String(), "quick": cfg.quick,
			"managed_fields": cfg.managedFields, "phases": phaseNames(cfg.phases),
			"server_flags": cfg.serverFlags,
		},
		Environment: map[string]interface{}{
			"go":                 runtime.Version(),
			"cpus":               runtime.NumCPU(),
			"gomaxprocs":         runtime.GOMAXPROCS(0),
			"load_average_start": loadAverage(),
			"machine":            machine(),
		},
	}
}

// machine names the machine a run measured: CPUs and their model, the
// operating system and architecture, Go's version.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

var progressStart = time.Now()

func progress(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(progressStart).Seconds(), fmt.Sprintf(format, args...))
}

// profilePhase runs fn under the CPU, blocking and mutex profiles when
// -profile-phase names phase ("all" is the whole run).
func profilePhase(cfg config, f *os.File, phase string, fn func() error) error {
	if cfg.profilePhase != phase {
		return fn()
	}
	if cfg.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		defer writeProfile("block", cfg.blockProfile)
		defer runtime.SetBlockProfileRate(0)
	}
	if cfg.mutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
		defer writeProfile("mutex", cfg.mutexProfile)
		defer runtime.SetMutexProfileFraction(0)
	}
	if f != nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return fn()
}

func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// writeJSONFile writes rep as JSON to path.
func writeJSONFile(path string, rep *report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.writeJSON(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
