// Package robustness checks the cache's promises the way etcd's robustness
// tests check etcd's: clients send random traffic to a real cache while
// faults are injected, every operation is recorded with its call and return
// times and its answer, and the recorded history is checked afterwards
// against models that share no code with the cache:
//
//   - linearizability (porcupine): each object, written and read through
//     its shard's partition with consistent reads, behaves as one register
//     whose value and resourceVersion change only by acknowledged writes
//     (model.go);
//   - watches (watch.go): events in resourceVersion order, none twice, none
//     missing between the revision a watch started from and the last one it
//     delivered, resumed watches continuing where they stopped (or refused
//     with 410 Gone after a compaction), every event's object the one the
//     write that made it acknowledged;
//   - convergence: after the faults, a final consistent read of every key is
//     part of the history, so nothing acknowledged is missing and nothing
//     deleted comes back;
//   - no 500 (answers.go): every 5xx answer a client received is counted by
//     status and reason; a 500 fails the run (a fault the cache answers, an
//     etcd that cannot serve included, is a 503 with Retry-After).
//
// Faults (robustness_test.go) are restarts of the cache server on its data and etcd
// compactions, and, per shape, more (a full disk: fulldisk_test.go).
// Seeded faults (proxy.go) are deliberate bugs a test switches on in a
// proxy between the clients and the cache — a consistent read answered
// from an older answer, a resumed watch that skips an event, a watch that
// delivers two events out of order, a write stored and then answered 507
// — to show that the checks name each of them.
//
// The soak (soak_test.go, opt-in: -robustness.soak) runs an hour of that
// traffic in windows, each window's history checked alone, on caches in
// child processes, with informers relisting and objects that only grow,
// and samples each process (samples_test.go): goroutines, file
// descriptors, memory and its etcd database must not grow beyond what its
// objects take.
//
// `go test ./cache/robustness` runs a short run; a long run and a report:
// `go test ./cache/robustness -run TestRobustness -robustness.duration=10m -v`.
// A failing history is saved as JSON (-robustness.save-dir) and can be
// checked again alone: `-run TestCheckSavedHistory -robustness.history=FILE`.
package robustness
