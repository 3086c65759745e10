// Package backup is the server's side of a backup: it takes a cache
// server's etcd data out of the running server.
//
//   - Handler serves kcpcache.BackupPath on a server that runs its own etcd
//     member: a consistent snapshot of the member, streamed as etcd's
//     Maintenance.Snapshot sends it (the bbolt database, then its SHA-256).
//     Unavailable answers the same path on a server whose etcd is not its
//     own (--etcd-servers): a Status saying to use etcdctl against that etcd.
//
// The operator's side is package backupfile: Save fetches a backup through
// a running server and writes it to a file, Verify checks a file, and
// Restore makes a fresh data directory for the embedded member out of one,
// offline. It is a package of its own because it needs etcdutl, which the
// server does not: kcp, which imports the server to mount it in-process,
// would otherwise have to add etcdutl to its module graph, and that raises
// two versions kcp v0.32.3 selects (github.com/mattn/go-runewidth 0.0.12 to
// 0.0.16, github.com/rivo/uniseg 0.2.0 to 0.4.7).
//
// Guarantees (of both packages):
//   - A backup holds every write the server had acknowledged when the
//     request arrived (a linearizable read precedes the snapshot), and is
//     one point in etcd's history: the member's state at one revision.
//   - Save reports success only for a file whose hash matches its content
//     and whose database passes bbolt's consistency check; the file appears
//     under its name complete (written aside, synced, renamed), mode 0600,
//     or not at all.
//   - Restore never writes into a directory a running member holds, and
//     replaces a directory that holds anything only when told to (Force),
//     after the restored directory is complete.
//   - A restored directory starts a new cache epoch: the member gets a new
//     etcd cluster ID (a cluster token of the restore's own), and the epoch
//     is derived from it (package epoch). Its revisions continue well above
//     any the restored member had (RevisionBump) and the older ones count as
//     compacted, so a client resuming a watch from a revision it saw before
//     the restore is told to relist (410 Gone) instead of being served a
//     different history under the same numbers.
package backup
