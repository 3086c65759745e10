// Package reload keeps credentials that live in files current while the
// server runs, for the files upstream does not already watch: the static
// token file (--token-auth-file, authentication.TokenFile) and the peers'
// kubeconfigs (--peer, --peers-kubeconfig, Kubeconfig). The serving
// certificate and the client CA are upstream's: its dynamiccertificates
// controllers reload them (see package server).
//
// A Watcher gives these guarantees:
//
//   - Polled, not notified: every Interval it reads each file whole and
//     compares what it read with what is in force, so a rename, a
//     Kubernetes Secret volume's symlink swap or an edit in place are all
//     seen, whatever the file system tells of them.
//   - The last good content stays in force: content that cannot be loaded
//     (a missing file, a malformed line, a kubeconfig naming another
//     server) is logged once, counted in kcp_cache_file_reloads_total
//     {result="error"} and shown in kcp_cache_file_reload_failing until
//     content that loads replaces it.
//   - What is in force is exactly what was read: a source loads from the
//     bytes whose digest it records (or reads its files after the digest),
//     so a change made while it loads is seen at the next poll.
//   - Not atomic across files: a writer should replace a file by renaming
//     a complete one over it; a file caught half-written is loaded as it
//     is when it parses, and replaced at the next poll.
package reload
