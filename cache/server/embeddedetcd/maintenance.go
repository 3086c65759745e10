package embeddedetcd

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// The member keeps its own file small. Compaction (dropping old revisions)
// is the apiserver's: it compacts every --etcd-compaction-interval. That
// frees pages inside bbolt's file but never shrinks it; only a
// defragmentation does, and it blocks the member's reads and writes while it
// copies the live data into a new file. etcd's guidance is to defragment when
// most of the file is free: then the copy is short (it is proportional to
// the data in use, not to the file) and the gain is large. Reads of the
// cache keep being served from the watch cache meanwhile; writes wait.

// startMaintenance runs maintain every interval until Close.
func (s *Server) startMaintenance(ctx context.Context, cfg Config) {
	interval := orDefault(cfg.MaintenanceInterval, DefaultMaintenanceInterval)
	if interval < 0 {
		return
	}
	minFree := cfg.DefragMinFreeBytes
	if minFree == 0 {
		minFree = DefaultDefragMinFreeBytes
	}
	registerMetrics()
	quotaBytes.Set(float64(s.etcd.Config().QuotaBackendBytes))
	ctx, cancel := context.WithCancel(ctx)
	s.stopMaintenance, s.maintenanceDone = cancel, make(chan struct{})
	go func() {
		defer close(s.maintenanceDone)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			s.maintain(ctx, minFree)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// maintain records the database size and defragments when the file is
// mostly free space.
func (s *Server) maintain(ctx context.Context, minFree int64) {
	logger := klog.FromContext(ctx)
	size, inUse := s.DBSize()
	dbSizeBytes.Set(float64(size))
	dbSizeInUseBytes.Set(float64(inUse))
	if !worthDefragmenting(size, inUse, minFree) {
		return
	}
	start := time.Now()
	if err := s.etcd.Server.Defragment(); err != nil {
		defragmentations.WithLabelValues("error").Inc()
		logger.Error(err, "Defragmenting the embedded etcd's database", "sizeBytes", size, "inUseBytes", inUse)
		return
	}
	took := time.Since(start)
	defragDuration.Observe(took.Seconds())
	defragmentations.WithLabelValues("success").Inc()
	after, afterInUse := s.DBSize()
	dbSizeBytes.Set(float64(after))
	dbSizeInUseBytes.Set(float64(afterInUse))
	logger.Info("Defragmented the embedded etcd's database", "beforeBytes", size, "afterBytes", after, "inUseBytes", afterInUse, "duration", took)
}

// worthDefragmenting is etcd's rule of thumb: more than half of the file is
// free, and enough of it to matter.
func worthDefragmenting(size, inUse, minFree int64) bool {
	free := size - inUse
	return free >= minFree && free*2 > size
}

// DBSize returns the size of the database file and how much of it holds
// data; the rest is free pages that only a defragmentation returns.
func (s *Server) DBSize() (size, inUse int64) {
	be := s.etcd.Server.Backend()
	return be.Size(), be.SizeInUse()
}
