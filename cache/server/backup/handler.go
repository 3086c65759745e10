package backup

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// ReasonExternalEtcd is the reason of the Status a server on an external
// etcd answers at kcpcache.BackupPath (code 501).
const ReasonExternalEtcd metav1.StatusReason = "ExternalEtcd"

// ContentType is the media type of a backup: the bytes etcd's snapshot
// stream carries.
const ContentType = "application/octet-stream"

// barrierKey is read, linearizably, before the snapshot is taken; nothing
// writes it.
const barrierKey = "/kcp-cache/backup-barrier"

// firstChunkSize is how much of the snapshot Handler reads before it
// answers 200: an etcd that fails at once still gets a Status.
const firstChunkSize = 32 * 1024

// Snapshotter is what Handler needs of an etcd client: a linearizable read
// and the member's snapshot (clientv3.Client has both).
type Snapshotter interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Snapshot(ctx context.Context) (io.ReadCloser, error)
}

// Handler serves kcpcache.BackupPath from etcd, a client of the server's own
// member (one endpoint: a snapshot is one member's state). GET answers 200
// and streams the snapshot: first a linearizable read, so that the member
// has applied every write acknowledged before the request, then etcd's
// Maintenance.Snapshot of it. The response is not buffered; the caller
// checks the hash at its end (Verify). If etcd fails before the first bytes
// the answer is a 503 Status; after them, the connection is cut, so that
// the client never takes a short stream for a whole one. Other methods
// answer 405.
//
// The handler chain authenticates and authorizes the path like any other
// (the authorization rule backup-masters-only: system:masters alone), and
// must count it as long-running: a large database takes longer than the
// request timeout to send.
func Handler(etcd Snapshotter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		ctx := req.Context()
		logger := klog.FromContext(ctx)
		if _, err := etcd.Get(ctx, barrierKey, clientv3.WithCountOnly()); err != nil {
			unavailable(w, "reading etcd before the snapshot: "+err.Error())
			return
		}
		snap, err := etcd.Snapshot(ctx)
		if err != nil {
			unavailable(w, "opening etcd's snapshot stream: "+err.Error())
			return
		}
		defer func() { _ = snap.Close() }()
		first := make([]byte, firstChunkSize)
		n, err := io.ReadFull(snap, first)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			// An empty stream is an error too: a snapshot is never empty.
			unavailable(w, "reading etcd's snapshot: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", ContentType)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		sent, err := w.Write(first[:n])
		if err == nil && n == firstChunkSize {
			var rest int64
			rest, err = io.Copy(w, snap)
			sent += int(rest)
		}
		if err != nil {
			logger.Error(err, "Backup cut short: aborting the response", "sentBytes", sent)
			// The client sees a broken connection, not a clean end.
			panic(http.ErrAbortHandler)
		}
		logger.Info("Backup sent", "bytes", sent)
	})
}

// Unavailable serves kcpcache.BackupPath on a server without an etcd member
// of its own: every GET answers 501 with reason ReasonExternalEtcd and a
// message saying how to back up that etcd instead.
func Unavailable(message string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		writeStatus(w, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusNotImplemented,
			Reason:  ReasonExternalEtcd,
			Message: message,
		}})
	})
}

func allowGet(w http.ResponseWriter, req *http.Request) bool {
	if req.Method == http.MethodGet {
		return true
	}
	w.Header().Set("Allow", http.MethodGet)
	writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "backup"}, req.Method))
	return false
}

func unavailable(w http.ResponseWriter, reason string) {
	w.Header().Set("Retry-After", "1")
	writeStatus(w, apierrors.NewServiceUnavailable("cannot take a backup now: "+reason))
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
