package server

import (
	"net/http"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/backup"
)

// externalEtcdBackupMessage is what a server on an external etcd answers at
// kcpcache.BackupPath.
const externalEtcdBackupMessage = "this cache server keeps its data in an external etcd (--etcd-servers), " +
	"which it does not own and cannot restore: back up that etcd with `etcdctl snapshot save` against one of its members, " +
	"and restore it as its operator restores it"

// serveBackup serves kcpcache.BackupPath: a snapshot of the embedded
// member, taken online (cache-server backup fetches it), or, on an external
// etcd, a Status saying to back that etcd up with etcdctl. An in-memory
// member is backed up too; its backup restores into an on-disk cache.
//
// Online through the server rather than offline from the data directory:
// the member listens on loopback only, with certificates made anew at every
// start, so nothing outside the process can reach it; under kcp-operator or
// in the image, the data directory is the running pod's. The server
// authenticates and authorizes the request like any other (rule
// backup-masters-only), and the snapshot is consistent without stopping
// anything.
func (s *Server) serveBackup() {
	h := backup.Unavailable(externalEtcdBackupMessage)
	if s.etcd != nil {
		h = backup.Handler(s.etcdClient)
	}
	s.GenericAPIServer.Handler.NonGoRestfulMux.Handle(kcpcache.BackupPath, h)
}

// withLongRunningBackup makes the handler chain count a backup as a
// long-running request, as it does watches: it streams the whole database,
// which may take longer than the request timeout, and must not hold one of
// the requests in flight meanwhile.
func withLongRunningBackup(longRunning apirequest.LongRunningRequestCheck) apirequest.LongRunningRequestCheck {
	return func(r *http.Request, info *apirequest.RequestInfo) bool {
		if info != nil && !info.IsResourceRequest && info.Path == kcpcache.BackupPath {
			return true
		}
		return longRunning != nil && longRunning(r, info)
	}
}
