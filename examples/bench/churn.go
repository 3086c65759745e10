package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// churn creates cfg.churnObjects objects, deletes them all and idles for
// cfg.churnIdle, taking memory snapshots at the peak and after the idle
// period. A cache that only grows (watch cache history, etcd's raft log and
// revisions, the Go heap returning nothing) shows as an "after" above the
// peak.
func (b *bench) churn(ctx context.Context) error {
	n := b.cfg.churnObjects
	progress("creating %d objects", n)
	if _, err := b.create(ctx, "churn", 0, n, b.cfg.loadConcurrency); err != nil {
		return err
	}
	peak, err := takeMemSnapshot()
	if err != nil {
		return err
	}
	progress("deleting %d objects", n)
	start := time.Now()
	if err := b.deleteAll(ctx, "churn", n, b.cfg.loadConcurrency); err != nil {
		return err
	}
	deleted := time.Since(start)
	progress("idling %s", b.cfg.churnIdle)
	// The idle period is what is measured, not a wait for something.
	select {
	case <-time.After(b.cfg.churnIdle):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := takeMemSnapshot()
	if err != nil {
		return err
	}
	sites := topGrowth(peak.BySite, after.BySite, 8)
	for i := range sites {
		sites[i].Bytes /= float64(n)
	}
	if b.rep.Memory == nil {
		b.rep.Memory = map[string]interface{}{}
	}
	b.rep.Memory["churn_growth_sites_per_object"] = sites
	meaning := fmt.Sprintf("after creating %d objects, deleting them all (%s) and idling %s ÷ with the %d objects present; 1.0 or less means memory is given back", n, deleted.Round(time.Millisecond), b.cfg.churnIdle, n)
	b.rep.add(memoryRow("8a", fmt.Sprintf("heap after deleting %d objects and idling", n), after.HeapAlloc, peak.HeapAlloc, meaning, n))
	b.rep.add(memoryRow("8b", fmt.Sprintf("RSS after deleting %d objects and idling", n), after.VmRSS, peak.VmRSS, meaning, n))
	return nil
}

// deleteAll deletes objects [0, n) named prefix-NNNNN with conc workers.
func (b *bench) deleteAll(ctx context.Context, prefix string, n, conc int) error {
	var next atomic.Int64
	return parallel(conc, func() error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			r, err := b.resource(b.l.scopeOf(i), false)
			if err != nil {
				return err
			}
			if err := r.Delete(ctx, objectName(prefix, i), deleteOptions); err != nil {
				return fmt.Errorf("deleting %s in %s: %w", objectName(prefix, i), b.l.scopeOf(i), err)
			}
		}
	})
}

// memoryRow compares memory after the churn with memory at its peak.
func memoryRow(id, metric string, after, peak uint64, meaning string, n int) *row {
	return &row{
		ID: id, Metric: metric,
		Cache: mib(after), Baseline: mib(peak) + " at the peak",
		CacheValue: float64(after), BaselineValue: float64(peak), Unit: "bytes",
		Ratio: ratio(float64(after), float64(peak)), RatioMeaning: meaning,
		Target:     &target{Text: "≤ 1×", AtMost: true, Bound: 1},
		Indicative: n != 50000,
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
