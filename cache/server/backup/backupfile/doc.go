// Package backupfile is the operator's side of a backup (package backup is
// the server's): Save fetches a backup through a running server, as
// system:masters, and writes it to a file; Verify checks a file; Restore
// makes a fresh data directory for the embedded member out of a backup,
// offline. `cache-server backup` and `cache-server restore` are these.
// Package backup's documentation gives the guarantees of both.
//
// It holds what needs etcdutl (its snapshot status and restore), so that
// the server, which kcp imports to mount it in-process, does not.
package backupfile
