package filters

import (
	"fmt"
	"net/http"
	"runtime/metrics"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// ReasonInsufficientStorage is the reason of a write refused, and not
// done, because the server's memory is full (WithMemoryGuard), its
// etcd's disk is nearly full (WithDiskGuard) or its etcd's database is at
// its quota (507). It is partition's, where the last of these is answered.
const ReasonInsufficientStorage = partition.ReasonInsufficientStorage

// liveHeapMetric is the Go heap's live bytes as of the last collection:
// what the objects the server holds take, garbage not counted.
const liveHeapMetric = "/gc/heap/live:bytes"

// LiveHeap reads liveHeapMetric.
func LiveHeap() uint64 {
	sample := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// WithMemoryGuard refuses a create with 507 InsufficientStorage while the
// live heap is at or above full bytes (full 0: never): a cache holds every
// object in its watch cache, so a server whose live data approaches its
// memory limit must take no more, or the kernel kills it (and an in-memory
// cache loses everything). Reads, updates and deletes go on, so clients
// can read everything and free memory; a create is refused, never half
// done. The limit is the operator's (--memory-limit); live reads the live
// heap (LiveHeap; replaced in tests).
func WithMemoryGuard(handler http.Handler, full uint64, live func() uint64, codecs runtime.NegotiatedSerializer) http.Handler {
	if full == 0 {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		info, ok := request.RequestInfoFrom(req.Context())
		if ok && info.IsResourceRequest && info.Verb == "create" {
			if heap := live(); heap >= full {
				err := &apierrors.StatusError{ErrStatus: metav1.Status{
					Status: metav1.StatusFailure,
					Code:   http.StatusInsufficientStorage,
					Reason: ReasonInsufficientStorage,
					Message: fmt.Sprintf("this cache's live data takes %d MiB, at or above %d MiB (a share of its memory limit, --memory-limit): it takes no new objects until some are deleted or the limit is raised; reads, updates and deletes go on",
						heap>>20, full>>20),
				}}
				writeStatus(w, req, codecs, err)
				return
			}
		}
		handler.ServeHTTP(w, req)
	})
}
