package filters

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// DiskSamplePeriod is how old a reading of the free disk space may be: a
// statfs per second at most, however many writes arrive.
const DiskSamplePeriod = time.Second

// FreeDisk is the space under dir that an unprivileged writer may still use
// (statfs: available blocks times the block size). Root may use a few
// reserved blocks more; counting without them errs on the safe side.
func FreeDisk(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// DiskSampler reads the free space under a directory when asked, at most
// once per Period: the guard asks at every write, and a reading a second
// old is as good as a new one for a disk that fills at the rate of a
// cache's writes. It starts no goroutine: a server that takes no writes
// reads nothing.
type DiskSampler struct {
	// Directory is where the space is read (the embedded etcd's).
	Directory string
	// Period is how old a reading may be; 0: DiskSamplePeriod.
	Period time.Duration
	// Statfs reads the free space; nil: FreeDisk. Now is the clock; nil:
	// time.Now. Both are replaced in tests.
	Statfs func(dir string) (uint64, error)
	Now    func() time.Time

	mu   sync.Mutex
	at   time.Time
	free uint64
	err  error
}

// Free is the free space under Directory as of at most Period ago, or the
// error of that reading.
func (s *DiskSampler) Free() (uint64, error) {
	now, statfs, period := time.Now, FreeDisk, DiskSamplePeriod
	if s.Now != nil {
		now = s.Now
	}
	if s.Statfs != nil {
		statfs = s.Statfs
	}
	if s.Period > 0 {
		period = s.Period
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := now(); s.at.IsZero() || t.Sub(s.at) >= period {
		s.free, s.err = statfs(s.Directory)
		s.at = t
	}
	return s.free, s.err
}

// guardedWrites are the verbs that add objects' data to etcd. A delete
// adds only a tombstone and is how space is freed (once etcd compacts
// and defragments); a read writes nothing.
var guardedWrites = map[string]bool{"create": true, "update": true, "patch": true}

// WithDiskGuard refuses a create, an update or a patch of a partition
// object with 507 InsufficientStorage while free says less than minFree
// bytes are free under the embedded etcd's directory (minFree 0: never).
// etcd does not refuse a write on a full disk: it ends the process at its
// next commit (lg.Fatal "failed to commit tx"), taking every read with it.
// Refused before storage, a write is never half done: the answer says
// nothing was written. Reads and deletes go on, so clients can read
// everything and free space; so do the system partition's writes (CRDs,
// the server's own), so that a server restarted on a nearly full disk
// still starts, and a dry run, which writes nothing. /readyz stays ready:
// a cache that takes no writes still serves reads. An error reading the
// free space lets the write through (logged): the guard is a protection,
// not a dependency.
func WithDiskGuard(handler http.Handler, minFree uint64, free func() (uint64, error), codecs runtime.NegotiatedSerializer) http.Handler {
	if minFree == 0 {
		return handler
	}
	// refusing is whether the last guarded write was refused: the log
	// says when the guard starts and stops refusing, not at every write.
	var refusing atomic.Bool
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !guarded(req) {
			handler.ServeHTTP(w, req)
			return
		}
		logger := klog.FromContext(req.Context())
		avail, err := free()
		if err != nil {
			logger.Error(err, "Reading the free disk space of the embedded etcd: the write goes on unguarded")
			handler.ServeHTTP(w, req)
			return
		}
		if avail >= minFree {
			if refusing.Swap(false) {
				logger.Info("Free disk space of the embedded etcd is above the minimum again: taking writes", "freeBytes", avail, "minFreeBytes", minFree)
			}
			handler.ServeHTTP(w, req)
			return
		}
		if !refusing.Swap(true) {
			logger.Error(nil, "Free disk space of the embedded etcd is below the minimum: refusing creates, updates and patches until space is freed", "freeBytes", avail, "minFreeBytes", minFree)
		}
		writeStatus(w, req, codecs, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure,
			Code:   http.StatusInsufficientStorage,
			Reason: ReasonInsufficientStorage,
			Message: fmt.Sprintf("nothing was written: the disk of this cache's etcd has %d MiB free, below %d MiB (--embedded-etcd-min-free-disk-bytes); creates, updates and patches are refused until space is freed; reads and deletes go on",
				avail>>20, minFree>>20),
		}})
	})
}

// guarded reports whether req is a write the disk guard may refuse: a
// create, update or patch of an object in a partition, not a dry run.
func guarded(req *http.Request) bool {
	info, ok := request.RequestInfoFrom(req.Context())
	if !ok || !info.IsResourceRequest || !guardedWrites[info.Verb] {
		return false
	}
	if scope, ok := kcpcache.ScopeFrom(req.Context()); !ok || scope.IsSystem() {
		return false
	}
	return len(req.URL.Query()["dryRun"]) == 0
}
