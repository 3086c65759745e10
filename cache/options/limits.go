package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

const (
	// DefaultMaxRequestsInFlight and DefaultMaxMutatingRequestsInFlight are
	// kube-apiserver's defaults of the same flags.
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200

	// DefaultMaxListObjectsInFlight is about one LIST of a kcp shard's
	// largest types at a time (6 MB of JSON for 5,000 APIExports): enough
	// to keep one core busy encoding, little enough that a storm of LISTs
	// neither starves GETs and writes of CPU nor holds hundreds of lists in
	// memory at once.
	DefaultMaxListObjectsInFlight = 5000
	// DefaultListWaitTimeout bounds how long a LIST waits for the budget
	// before it is refused with 429; client-go then retries by itself.
	DefaultListWaitTimeout = 30 * time.Second
)

// LimitOptions bound what the server does at once, so that single-object
// reads and writes stay fast while large LISTs run.
//
// The two in-flight limits are upstream's max-in-flight filter. API
// Priority and Fairness, which kube-apiserver uses instead, needs the
// flowcontrol.apiserver.k8s.io types served to read its configuration from;
// this server serves the kcp types and CRDs only, so it cannot run it.
type LimitOptions struct {
	// MaxRequestsInFlight bounds the non-mutating requests served at once
	// (watches excepted); more are refused with 429. Zero: no bound.
	MaxRequestsInFlight int
	// MaxMutatingRequestsInFlight bounds the mutating requests served at
	// once; more are refused with 429. Zero: no bound.
	MaxMutatingRequestsInFlight int

	// MaxListObjectsInFlight bounds the objects all LISTs of the data plane
	// hold and encode at once. A LIST is admitted by its size: one that
	// would exceed the budget waits; a LIST larger than the whole budget
	// runs alone. Zero: no budget.
	MaxListObjectsInFlight int
	// ListWaitTimeout bounds a LIST's wait for the budget; after it the LIST
	// is answered 429 with Retry-After.
	ListWaitTimeout time.Duration
	// ReturnMemoryAfterLists returns the heap that a burst of LISTs left
	// behind to the operating system once the burst is over (a forced
	// collection, at most once a minute). Without it the process keeps its
	// peak size for minutes.
	ReturnMemoryAfterLists bool
	// MemoryLimit is what the server may hold in memory (memory_limit.go):
	// "auto" (the process's memory cgroup's limit, if any), "none", or a
	// quantity. A standalone server sets its Go runtime's memory limit to
	// 90% of it; every server refuses new objects (507) while its live
	// heap is above FullPercent of it.
	MemoryLimit string
	// GCPercent is the garbage collector's target (GOGC) a standalone
	// server sets (gc_percent.go); GOGC in the environment wins. A mounted
	// cache leaves its host's.
	GCPercent int
	// ReturnMemoryAtRest has a standalone server return its free heap to
	// the operating system once a burst of allocation (writes, a watch
	// cache's fill, LISTs) is over and the process rests (cache/memreturn):
	// at rest it then holds about its live heap, not the collector's goal.
	ReturnMemoryAtRest bool
}

// NewLimitOptions returns the defaults.
func NewLimitOptions() *LimitOptions {
	return &LimitOptions{
		MaxRequestsInFlight:         DefaultMaxRequestsInFlight,
		MaxMutatingRequestsInFlight: DefaultMaxMutatingRequestsInFlight,
		MaxListObjectsInFlight:      DefaultMaxListObjectsInFlight,
		ListWaitTimeout:             DefaultListWaitTimeout,
		ReturnMemoryAfterLists:      true,
		MemoryLimit:                 MemoryLimitAuto,
		GCPercent:                   DefaultGCPercent,
		ReturnMemoryAtRest:          true,
	}
}

// AddFlags adds the flags to fs.
func (o *LimitOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.MaxRequestsInFlight, "max-requests-inflight", o.MaxRequestsInFlight,
		"The most non-mutating requests (GET, LIST; watches excepted) served at once; more are answered 429. 0: no limit. As kube-apiserver's flag; API Priority and Fairness is not available here.")
	fs.IntVar(&o.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInFlight,
		"The most mutating requests (create, update, patch, delete) served at once; more are answered 429. 0: no limit.")
	fs.IntVar(&o.MaxListObjectsInFlight, "max-list-objects-in-flight", o.MaxListObjectsInFlight,
		"The most objects all LISTs of cached types hold and encode at once. A LIST that would exceed it waits (up to --list-wait-timeout); one larger than the whole budget runs alone. Keeps GETs and writes fast and memory bounded during storms of large LISTs. 0: no budget.")
	fs.DurationVar(&o.ListWaitTimeout, "list-wait-timeout", o.ListWaitTimeout,
		"How long a LIST may wait for --max-list-objects-in-flight before it is answered 429 with Retry-After.")
	fs.BoolVar(&o.ReturnMemoryAfterLists, "return-memory-after-lists", o.ReturnMemoryAfterLists,
		"After a burst of LISTs, return the memory it used to the operating system (a forced garbage collection, at most once a minute).")
	fs.StringVar(&o.MemoryLimit, "memory-limit", o.MemoryLimit,
		"What the server may hold in memory: auto (the limit of the process's memory cgroup, e.g. a container's; none if it has none), none, or a quantity (e.g. 2Gi). A standalone server sets the Go runtime's memory limit to 90% of it (unless GOMEMLIMIT is set), so that it collects garbage before the kernel would kill it, and refuses new objects with 507 while its live heap is above 40% of it, so that what it holds keeps fitting; reads, updates and deletes go on.")
	fs.IntVar(&o.GCPercent, "gogc", o.GCPercent,
		"The Go garbage collector's target for a standalone server, as GOGC: the heap may grow by this percentage of what is live before the next collection. Lower keeps less memory at rest and costs more CPU per write; Go's default is 100. GOGC in the environment wins. 10 to 1000.")
	fs.BoolVar(&o.ReturnMemoryAtRest, "return-memory-at-rest", o.ReturnMemoryAtRest,
		"A standalone server returns its free memory to the operating system once a burst of allocation is over (256 MiB or more allocated at over 4 MiB a second, then a second with less): one forced garbage collection, at most once a minute, so that at rest it holds about its live heap rather than the heap it grew to while loaded.")
}

// Validate checks the bounds.
func (o *LimitOptions) Validate() []error {
	var errs []error
	if o.MaxRequestsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-requests-inflight must not be negative, got %d", o.MaxRequestsInFlight))
	}
	if o.MaxMutatingRequestsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-mutating-requests-inflight must not be negative, got %d", o.MaxMutatingRequestsInFlight))
	}
	if o.MaxListObjectsInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-list-objects-in-flight must not be negative, got %d", o.MaxListObjectsInFlight))
	}
	if _, _, err := o.ResolveMemoryLimit(); err != nil {
		errs = append(errs, err)
	}
	if err := validateGCPercent(o.GCPercent); err != nil {
		errs = append(errs, err)
	}
	if o.MaxListObjectsInFlight > 0 && o.ListWaitTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--list-wait-timeout must be positive with a LIST budget, got %s", o.ListWaitTimeout))
	}
	return errs
}
