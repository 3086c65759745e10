package options

import (
	"fmt"
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the Go garbage collector's target (GOGC) that a
// standalone server sets for itself. Go's default, 100, lets the heap grow
// to twice what is live before it collects, and the runtime keeps about
// that much mapped: for a cache, whose live heap is mostly the objects it
// holds, that doubles the memory at rest for headroom that only its
// requests' garbage needs. At 50 the heap may grow by half of what is live;
// docs/performance.md ("Choices for memory at rest") gives what each value
// costs in memory and in write throughput.
const DefaultGCPercent = 50

// StartGCPercent is the collector's target while a standalone server
// starts, until every bootstrapped type serves from its watch cache: the
// fill decodes every stored object, and its garbage (etcd's answers, the
// decoders' buffers) is most of what a start allocates while the live heap
// grows from nothing to the cache. Collections are paced by allocation, so
// each costs a walk of the heap for every GOGC percent of it allocated: at
// 50 the fill collects four times as often as at 200 and the collector was
// the largest single cost of a start beside the decoding
// (docs/performance.md, "Restart"). The heap the start may reach is
// bounded the same way at rest: by the memory limit, which the runtime
// honours whatever the target.
const StartGCPercent = 200

// ApplyGCPercent sets the garbage collector's target of the process for its
// start (the larger of --gogc and StartGCPercent) and returns the target
// at rest, --gogc, for SetGCPercentAtRest once the server serves (a
// standalone server's process is the server's own; a mounted cache leaves
// its host's as it is), unless GOGC is set in the environment, which wins
// throughout. It returns the target at rest (-1 when GOGC is in force) and
// where the target in force came from, for the log.
func (o CompletedOptions) ApplyGCPercent() (int, string) {
	if v := os.Getenv("GOGC"); v != "" {
		return -1, "GOGC=" + v + " in the environment"
	}
	debug.SetGCPercent(max(o.Limits.GCPercent, StartGCPercent))
	return o.Limits.GCPercent, "--gogc"
}

// SetGCPercentAtRest sets the collector's target to atRest, as
// ApplyGCPercent returned it; -1 (GOGC in force) leaves it.
func SetGCPercentAtRest(atRest int) {
	if atRest > 0 {
		debug.SetGCPercent(atRest)
	}
}

// validateGCPercent checks --gogc: a collection target of 0 would collect
// continuously and a negative one would turn the collector off, leaving the
// memory limit as the only bound; neither suits a server.
func validateGCPercent(v int) error {
	if v < 10 || v > 1000 {
		return fmt.Errorf("--gogc must be between 10 and 1000 (percent of the live heap that may be allocated before the next collection), got %d", v)
	}
	return nil
}
