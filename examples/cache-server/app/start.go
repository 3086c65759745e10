package app

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
)

const (
	// fillPoll is how often followFills asks whether the server fills its
	// cache; a start takes seconds.
	fillPoll = 50 * time.Millisecond
	// maxFill bounds a fill's collector target: a server whose types
	// cannot serve (a declaration that conflicts with stored data, which
	// /readyz names), or whose first copy of a peer outlasts it, rests at
	// its own target meanwhile.
	maxFill = 5 * time.Minute
)

// followFills gives the collector the target of a fill
// (options.StartGCPercent) while srv fills its cache (server.Filling: its
// start, a mirror's first copy of a peer) and its target at rest, atRest
// (options.ApplyGCPercent), otherwise, until ctx ends. A fill's target
// holds for at most maxFill of one fill. The end of each fill is logged
// with how long it took and the process's peak memory by then, which is
// what a fill needs of the memory limit beside what the cache keeps; the
// limit bounds the heap whatever the target.
func followFills(ctx context.Context, srv *server.Server, atRest int) {
	logger := klog.FromContext(ctx)
	ticker := time.NewTicker(fillPoll)
	defer ticker.Stop()
	// options.ApplyGCPercent gave the process the fill's target: the
	// start is the first fill.
	filling, raised, since := true, true, time.Now()
	for {
		now := srv.Filling()
		switch {
		case now && !filling:
			filling, since = true, time.Now()
			raised = true
			options.SetGCPercentForFill(atRest)
			logger.V(2).Info("The cache is filling; the garbage collector's target is a fill's", "gogc", max(atRest, options.StartGCPercent))
		case !now && filling:
			filling = false
			if raised {
				raised = false
				options.SetGCPercentAtRest(atRest)
			}
			logger.Info("The cache is filled: every bootstrapped type serves from its watch cache and the mirror has applied its first lists", "took", time.Since(since).Round(time.Millisecond), "gogc", atRest, "peakRSSBytes", peakRSS())
		case now && raised && time.Since(since) > maxFill:
			raised = false
			options.SetGCPercentAtRest(atRest)
			logger.Info("The cache is still filling; the garbage collector's target is now the one at rest", "waited", maxFill, "gogc", atRest)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, 0 where
// /proc does not say.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
