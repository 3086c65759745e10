package main

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted
// samples: the smallest sample that at least p percent of the samples are
// less than or equal to. Zero for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// summary describes a set of latency samples.
type summary struct {
	N    int           `json:"n"`
	Min  time.Duration `json:"min_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

func summarize(samples []time.Duration) summary {
	if len(samples) == 0 {
		return summary{}
	}
	sorted := append([]time.Duration(nil), samples...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var total time.Duration
	for _, d := range sorted {
		total += d
	}
	return summary{
		N:    len(sorted),
		Min:  sorted[0],
		P50:  percentile(sorted, 50),
		P90:  percentile(sorted, 90),
		P99:  percentile(sorted, 99),
		Max:  sorted[len(sorted)-1],
		Mean: total / time.Duration(len(sorted)),
	}
}

// ratio is a/b, or NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// perSecond is count/elapsed.
func perSecond(count int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(count) / elapsed.Seconds()
}

// target is a pass/fail bound on a row's value (usually its ratio).
type target struct {
	Text string `json:"text"`
	// AtMost is true for "value <= Bound", false for "value >= Bound".
	AtMost bool    `json:"at_most"`
	Bound  float64 `json:"bound"`
}

// met reports whether v meets t; false for NaN.
func (t target) met(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if t.AtMost {
		return v <= t.Bound
	}
	return v >= t.Bound
}

// checkpoints are the data-set sizes at which the load pauses to measure a
// "*/*" list: the result sizes of the scoped lists at full size (s/c, */c,
// s/*), 1,000, and the full size; sorted, unique, within (0, n].
func checkpoints(n int, l layout) []int {
	cands := []int{
		n / (l.shards * l.clusters), // s/c
		n / l.clusters,              // */c
		n / l.shards,                // s/*
		1000,
		n,
	}
	seen := map[int]bool{}
	var out []int
	for _, c := range cands {
		if c > 0 && c <= n && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Ints(out)
	return out
}

// processCPU is the CPU time (user + system) this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuSample is a reading of the machine's and this process's CPU counters.
type cpuSample struct {
	total, idle, iowait uint64 // jiffies over all CPUs, from /proc/stat
	own                 time.Duration
	at                  time.Time
}

func sampleCPU() cpuSample {
	s := cpuSample{own: processCPU(), at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	s.total, s.idle, s.iowait = parseProcStatCPU(line)
	return s
}

// parseProcStatCPU reads the aggregate "cpu" line of /proc/stat.
func parseProcStatCPU(line string) (total, idle, iowait uint64) {
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, 0
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user.
		if i >= 8 {
			break
		}
		total += n
		switch i {
		case 3:
			idle = n
		case 4:
			iowait = n
		}
	}
	return total, idle, iowait
}

// cpuUse is how busy the machine was between two samples, as shares of its
// whole capacity (1.0 = every CPU busy).
type cpuUse struct {
	Busy   float64 `json:"busy"`
	Own    float64 `json:"own"`
	Others float64 `json:"others"`
	IOWait float64 `json:"iowait"`
}

func cpuBetween(a, b cpuSample, cpus int) cpuUse {
	dt := b.total - a.total
	if dt == 0 || cpus == 0 {
		return cpuUse{}
	}
	busy := float64(dt-(b.idle-a.idle)-(b.iowait-a.iowait)) / float64(dt)
	own := (b.own - a.own).Seconds() / (b.at.Sub(a.at).Seconds() * float64(cpus))
	others := busy - own
	if others < 0 {
		others = 0
	}
	return cpuUse{Busy: busy, Own: own, Others: others, IOWait: float64(b.iowait-a.iowait) / float64(dt)}
}

func (u cpuUse) String() string {
	return fmt.Sprintf("machine %.0f%% busy (this process %.0f%%, other processes %.0f%%), iowait %.0f%%", 100*u.Busy, 100*u.Own, 100*u.Others, 100*u.IOWait)
}
