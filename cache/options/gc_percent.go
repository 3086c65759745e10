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

// ApplyGCPercent sets the garbage collector's target of the process to
// --gogc (a standalone server's process is the server's own; a mounted
// cache leaves its host's as it is), unless GOGC is set in the environment,
// which wins. It returns the target it set (-1 when GOGC is in force) and
// where the target in force came from, for the log.
func (o CompletedOptions) ApplyGCPercent() (int, string) {
	if v := os.Getenv("GOGC"); v != "" {
		return -1, "GOGC=" + v + " in the environment"
	}
	debug.SetGCPercent(o.Limits.GCPercent)
	return o.Limits.GCPercent, "--gogc"
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
