package memreturn

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A return follows a burst once the process rests, never during the burst,
// never for a trickle however long, and at most once per MinGap.
func TestReturnsOnceABurstIsOver(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		// perTick is what the process allocates before each reading.
		perTick []uint64
		// want is the readings (1-based) after which memory is returned.
		want []int
	}{
		{name: "a burst, then rest", perTick: []uint64{200 * mib, 200 * mib, 1 * mib, 1 * mib}, want: []int{3}},
		{name: "during a burst, none", perTick: []uint64{200 * mib, 200 * mib, 200 * mib, 200 * mib}},
		{name: "a trickle is never a burst", perTick: trickle(100, 3*mib)},
		{name: "a small burst is not worth a collection", perTick: []uint64{100 * mib, 1 * mib, 1 * mib}},
		{name: "two bursts a minute apart, two returns", perTick: append(append([]uint64{300 * mib, 0}, make([]uint64, 11)...), 300*mib, 0), want: []int{2, 15}},
		{name: "a second burst within a minute waits for the minute", perTick: []uint64{300 * mib, 0, 300 * mib, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, want: []int{2, 14}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var allocated uint64
			clock := time.Unix(0, 0)
			var got []int
			reading := 0
			r := New()
			r.Interval = 5 * time.Second
			r.allocated = func() uint64 { return allocated }
			r.now = func() time.Time { return clock }
			r.free = func() { got = append(got, reading); allocated += 2 * mib }
			s := r.start()
			for i, a := range tc.perTick {
				reading = i + 1
				allocated += a
				clock = clock.Add(r.Interval)
				if _, ok := s.tick(r); ok {
					r.free()
					s.returned(r)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("returned after readings %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("returned after readings %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func trickle(n int, each uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = each
	}
	return out
}

// The count Run reads moves with the process's allocation.
func TestAllocatedBytesMoves(t *testing.T) {
	before := allocatedBytes()
	sink := make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 64<<10))
	}
	_ = sink
	if after := allocatedBytes(); after < before+4<<20 {
		t.Errorf("allocated %d → %d after 4 MiB of allocation", before, after)
	}
}

// Run returns once after a burst and ends with its context.
func TestRunReturnsAfterABurstAndEnds(t *testing.T) {
	var mu sync.Mutex
	readings := 0
	freed := make(chan struct{}, 10)
	r := New()
	r.Interval = time.Millisecond
	r.allocated = func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		// A burst between the first reading and the second, then nothing.
		if readings++; readings == 1 {
			return 0
		}
		return 1 << 30
	}
	r.free = func() { freed <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	select {
	case <-freed:
	case <-time.After(10 * time.Second):
		t.Fatal("no return after a burst")
	}
	cancel()
	<-done
	if len(freed) != 0 {
		t.Errorf("%d more returns after one burst", len(freed))
	}
}
