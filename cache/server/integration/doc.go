// Package integration holds the cache server's integration tests: each
// starts a real embedded etcd and a real server on loopback through the
// one fixture, package cachetest, and talks to it over HTTP with client-go,
// as a shard, a reader or an operator would. The package has no code of
// its own; unit tests live next to the code they test.
package integration
