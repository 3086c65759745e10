// Package backup takes a cache server's etcd data out of the running server
// and puts it back into a stopped one.
//
//   - Handler serves kcpcache.BackupPath on a server that runs its own etcd
//     member: a consistent snapshot of the member, streamed as etcd's
//     Maintenance.Snapshot sends it (the bbolt database, then its SHA-256).
//     Unavailable answers the same path on a server whose etcd is not its
//     own (--etcd-servers): a Status saying to use etcdctl against that etcd.
//   - Save fetches a backup through a running server, as system:masters,
//     and writes it to a file; Verify checks a file.
//   - Restore makes a fresh data directory for the embedded member out of a
//     backup, offline.
//
// Guarantees:
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
