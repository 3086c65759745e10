package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// The restart phase measures a restart alone, repeatedly and for several
// builds of our server on the same data: it loads the scale phase's data
// set once (with the first of -restart-binaries) and then, -restart-reps
// times, SIGKILLs the server and starts each binary in turn on that data,
// measuring as the scale phase does (rows 11b and 11c) the time to the
// first /readyz 200 and to every type answering a consistent */* list.
// With more than one binary, the first is the baseline column and the
// last the cache column (the notes give every binary's samples), so that a
// change's before and after come from one run on one data set. -restart-cpuprofile writes each start's CPU profile of
// its first -restart-profile-seconds, from the server's profiler, and the
// server's log beside it.

// restartTimes are one binary's samples: the times to ready and to every
// type listable, and the process's peak RSS (VmHWM) by then, which is the
// memory a restart needs beside what the server keeps at rest.
type restartTimes struct {
	ready, filled []time.Duration
	peakRSS       []uint64
}

func runRestart(ctx context.Context, cfg config, rep *report) error {
	binaries := cfg.restartBinaries
	if len(binaries) == 0 {
		if cfg.scaleServerBinary == "" {
			return fmt.Errorf("-phases restart needs -restart-binaries or -scale-server-binary")
		}
		binaries = []string{cfg.scaleServerBinary}
	}
	for _, n := range cfg.scaleSizes {
		times, err := restartOne(ctx, cfg, binaries, n)
		if err != nil {
			return fmt.Errorf("restart at %d objects: %w", n, err)
		}
		for i, b := range binaries {
			rep.note("restart: %s at %d objects: ready %v; every type listable %v", b, n, rounded(times[i].ready), rounded(times[i].filled))
		}
		addRestartRows(rep, n, cfg.restartReps, binaries, times)
	}
	return nil
}

func rounded(ds []time.Duration) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.2fs", d.Seconds()))
	}
	return out
}

func restartOne(ctx context.Context, cfg config, binaries []string, n int) ([]restartTimes, error) {
	root, err := os.MkdirTemp("", "kcp-cache-restart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	extra := append([]string{"--cache-name=home"}, cfg.scaleServerArgs...)
	progress("restart: loading %d objects with %s", n, binaries[0])
	s, err := startScaleServer(ctx, "ours", binaries[0], filepath.Join(root, "server"), cfg.scaleMemoryLimit, true, extra...)
	if s != nil {
		defer s.stop()
	}
	if err != nil {
		return nil, err
	}
	dyn, err := client.NewForConfig(s.cfg)
	if err != nil {
		return nil, err
	}
	l := layout{shards: cfg.scaleShards, clusters: cfg.scaleClusters}
	if err := scaleLoad(ctx, dyn, l, n, cfg.objectBytes, cfg.loadConcurrency); err != nil {
		return nil, fmt.Errorf("loading: %w", err)
	}
	times := make([]restartTimes, len(binaries))
	for rep := range cfg.restartReps {
		for i, b := range binaries {
			s.kill()
			s.binary = b
			var profiled chan error
			if cfg.restartCPUProfile != "" {
				profiled = make(chan error, 1)
				file := fmt.Sprintf("%s-%d-%d.pprof", cfg.restartCPUProfile, i, rep)
				go func() { profiled <- fetchStartProfile(ctx, s, file, cfg.restartProfileSeconds) }()
			}
			started := time.Now()
			if err := s.start(ctx); err != nil {
				return nil, fmt.Errorf("restarting %s: %w", b, err)
			}
			ready := time.Since(started)
			for _, t := range scaleMix {
				if err := cachetest.Poll(ctx, func(ctx context.Context) error {
					return listableFromCache(ctx, dyn, t.gvr)
				}); err != nil {
					return nil, fmt.Errorf("waiting for %s after the restart of %s: %w", t.gvr.Resource, b, err)
				}
			}
			filled := time.Since(started)
			status, err := s.procStatus()
			if err != nil {
				return nil, fmt.Errorf("the peak RSS of %s: %w", b, err)
			}
			progress("restart: %s at %d objects: ready in %.2f s, every type listable in %.2f s, peak RSS %s", b, n, ready.Seconds(), filled.Seconds(), mib(status["VmHWM"]))
			times[i].ready = append(times[i].ready, ready)
			times[i].filled = append(times[i].filled, filled)
			times[i].peakRSS = append(times[i].peakRSS, status["VmHWM"])
			if profiled != nil {
				if err := <-profiled; err != nil {
					return nil, fmt.Errorf("CPU profile of %s: %w", b, err)
				}
				if err := os.WriteFile(fmt.Sprintf("%s-%d-%d.log", cfg.restartCPUProfile, i, rep), []byte(s.log.String()), 0o600); err != nil {
					return nil, err
				}
			}
		}
	}
	return times, nil
}

// fetchStartProfile asks s's profiler, as soon as it answers, for a CPU
// profile of the next seconds and writes it to file.
func fetchStartProfile(ctx context.Context, s *scaleServer, file string, seconds int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(seconds)*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.profilerHost, seconds)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := s.profiler.Do(req)
		if err == nil {
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// addRestartRows adds rows 12b and 12c of size n: the medians of the last
// binary (the cache column) against the first (the baseline).
func addRestartRows(rep *report, n, reps int, binaries []string, times []restartTimes) {
	add := func(letter, metric string, get func(restartTimes) []time.Duration) {
		cache, base := times[len(times)-1], restartTimes{}
		r := &row{ID: fmt.Sprintf("12%s-%d", letter, n), Metric: fmt.Sprintf("%s (%s objects), median of %d", metric, thousands(n), reps), Unit: "s", Ratio: math.NaN(), Baseline: "not run"}
		r.CacheValue = summarize(get(cache)).P50.Seconds()
		r.Cache = fmt.Sprintf("%.2f s (%s)", r.CacheValue, filepath.Base(binaries[len(binaries)-1]))
		if len(times) > 1 {
			base = times[0]
			r.BaselineValue = summarize(get(base)).P50.Seconds()
			r.Baseline = fmt.Sprintf("%.2f s (%s)", r.BaselineValue, filepath.Base(binaries[0]))
			r.Ratio = ratio(r.CacheValue, r.BaselineValue)
		}
		rep.add(r)
	}
	add("b", "restart (SIGKILL) to /readyz 200", func(t restartTimes) []time.Duration { return t.ready })
	add("c", "restart to every type listable", func(t restartTimes) []time.Duration { return t.filled })
	r := &row{ID: fmt.Sprintf("12d-%d", n), Metric: fmt.Sprintf("peak RSS of a restart, VmHWM once every type is listable (%s objects), median of %d", thousands(n), reps), Unit: "MiB", Ratio: math.NaN(), Baseline: "not run"}
	r.CacheValue = medianBytes(times[len(times)-1].peakRSS) / (1 << 20)
	r.Cache = fmt.Sprintf("%.1f MiB (%s)", r.CacheValue, filepath.Base(binaries[len(binaries)-1]))
	if len(times) > 1 {
		r.BaselineValue = medianBytes(times[0].peakRSS) / (1 << 20)
		r.Baseline = fmt.Sprintf("%.1f MiB (%s)", r.BaselineValue, filepath.Base(binaries[0]))
		r.Ratio = ratio(r.CacheValue, r.BaselineValue)
	}
	rep.add(r)
}

// medianBytes is the median of samples (the lower middle of an even count).
func medianBytes(samples []uint64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return float64(sorted[(len(sorted)-1)/2])
}

// parseBinaries splits a comma-separated list of paths.
func parseBinaries(v string) []string {
	var out []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}
