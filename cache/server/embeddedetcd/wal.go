package embeddedetcd

import (
	"fmt"
	"sync"

	"go.etcd.io/etcd/server/v3/storage/wal"
)

// walSegmentSize guards etcd's process-wide WAL segment size: the first
// member that sets one fixes it for the process.
var walSegmentSize struct {
	sync.Mutex
	set bool
}

// setWALSegmentSize sets etcd's WAL segment size for every member of the
// process. Zero leaves it as it is; the same size again is fine; another
// size after one was set is refused, since members already running would
// otherwise change their file size under them.
func setWALSegmentSize(size int64) error {
	if size == 0 {
		return nil
	}
	walSegmentSize.Lock()
	defer walSegmentSize.Unlock()
	if walSegmentSize.set {
		if wal.SegmentSizeBytes != size {
			return fmt.Errorf("embedded etcd WAL segment size is already %d bytes in this process; cannot change it to %d", wal.SegmentSizeBytes, size)
		}
		return nil
	}
	wal.SegmentSizeBytes = size
	walSegmentSize.set = true
	return nil
}
