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
	// startPoll is how often restAfterStart asks whether the bootstrapped
	// types serve; a start takes seconds.
	startPoll = 50 * time.Millisecond
	// maxStart bounds the start's collector target: a server whose types
	// cannot serve (a declaration that conflicts with stored data, which
	// /readyz names) rests at its own target meanwhile.
	maxStart = 5 * time.Minute
)

// restAfterStart waits until every bootstrapped type of srv serves from its
// watch cache, or maxStart, and then sets the collector's target at rest,
// atRest (options.ApplyGCPercent), logging how long the fill took and the
// process's peak memory by then, which is what a restart needs of the
// memory limit beside what the cache keeps. It returns early when ctx ends.
func restAfterStart(ctx context.Context, srv *server.Server, atRest int) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	ticker := time.NewTicker(startPoll)
	defer ticker.Stop()
	for srv.Types().ReadinessCheck() != nil {
		if time.Since(start) > maxStart {
			logger.Info("The bootstrapped types do not serve yet; the garbage collector's target is now the one at rest", "waited", maxStart, "gogc", atRest)
			options.SetGCPercentAtRest(atRest)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
	options.SetGCPercentAtRest(atRest)
	logger.Info("Every bootstrapped type serves from its watch cache", "sinceBuilt", time.Since(start).Round(time.Millisecond), "gogc", atRest, "peakRSSBytes", peakRSS())
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
