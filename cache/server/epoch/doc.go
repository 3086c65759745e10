// Package epoch keeps the cache's epoch: the name of one continuous history
// of its data, announced on every response (kcpcache.EpochHeader). Keeper
// resolves it when the server starts, from a marker in etcd and a record in
// the root directory, and records the highest etcd revision seen while the
// server runs, so that an etcd restored from an older copy starts a new
// epoch. keeper.go states the rules.
package epoch
