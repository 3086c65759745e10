// Package memreturn returns a process's free heap to the operating system
// once a burst of allocation is over.
//
// Go's runtime keeps the heap it grew to between collections: up to the
// collector's goal (the live heap plus GOGC percent of it) and its
// scavenger returns only what lies beyond about 10% above that goal. A
// cache is loaded in bursts (a shard's initial sync, a restart's fill, a
// storm of LISTs) and then rests, allocating little, so no collection runs
// and the process keeps the size of its busiest moment. After a burst, a
// forced collection that returns every free page (debug.FreeOSMemory)
// leaves the process at about its live heap, at the cost of one
// collection, and nothing while the burst lasts.
package memreturn

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/klog/v2"
)

// Returner watches the process's allocation and returns free memory once it
// rests after a burst. Its fields are the defaults New gives; tests replace
// the functions.
type Returner struct {
	// Interval is how often the allocation is read.
	Interval time.Duration
	// Quiet is the most bytes allocated in one Interval for the process to
	// be at rest: an idle server's heartbeats, metrics scrapes and progress
	// notifications allocate far less, a shard's sync or a LIST far more.
	Quiet uint64
	// Burst is the least bytes allocated in busy intervals (Quiet or more)
	// since the last return for a
	// return to be worth a forced collection, which costs CPU in
	// proportion to the live heap.
	Burst uint64
	// MinGap rate-limits the returns.
	MinGap time.Duration

	// allocated reads the bytes allocated since the process started.
	allocated func() uint64
	// free returns the free heap to the operating system.
	free func()
	// now is the clock.
	now func() time.Time
}

// New returns a Returner with the defaults.
func New() *Returner {
	return &Returner{
		Interval:  time.Second,
		Quiet:     4 << 20,
		Burst:     256 << 20,
		MinGap:    time.Minute,
		allocated: allocatedBytes,
		free:      debug.FreeOSMemory,
		now:       time.Now,
	}
}

// allocatedBytes is the runtime's cumulative count of heap allocation.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Run reads the allocation every Interval until ctx ends.
func (r *Returner) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	s := r.start()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if burst, ok := s.tick(r); ok {
				start := r.now()
				r.free()
				s.returned(r)
				logger.V(2).Info("Returned free memory to the operating system after a burst", "allocatedBytes", burst, "took", r.now().Sub(start))
			}
		}
	}
}

// state is what Run remembers between readings.
type state struct {
	// last is the allocation at the last reading; busy the bytes allocated
	// in busy intervals (Quiet or more) since the last return.
	last, busy uint64
	lastReturn time.Time
}

func (r *Returner) start() *state {
	return &state{last: r.allocated()}
}

// tick reads the allocation and says whether to return memory now: the
// process allocated less than Quiet since the last reading, at least Burst
// in busier intervals since the last return (a steady trickle is no
// burst), and the last return is MinGap old. It returns the bytes of the
// burst.
func (s *state) tick(r *Returner) (uint64, bool) {
	a := r.allocated()
	recent := a - s.last
	s.last = a
	if recent >= r.Quiet {
		s.busy += recent
		return s.busy, false
	}
	if s.busy < r.Burst || (!s.lastReturn.IsZero() && r.now().Sub(s.lastReturn) < r.MinGap) {
		return s.busy, false
	}
	return s.busy, true
}

// returned records a return: the collection's own allocation does not
// count towards the next burst.
func (s *state) returned(r *Returner) {
	s.last, s.busy, s.lastReturn = r.allocated(), 0, r.now()
}
