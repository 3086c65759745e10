// Package cachetest starts a real cache server for tests: an embedded etcd
// on free loopback ports (without fsync) and the server on 127.0.0.1 with a
// kernel-chosen port, both torn down by t.Cleanup. Tests talk to it with
// client-go over loopback HTTPS, exactly as shards do.
//
//	srv := cachetest.StartServer(t)
//	cfg := srv.ScopedConfig("amber", "root") // .../services/cache/shards/amber/clusters/root
//	srv.Restart(t)                           // same etcd, same address
package cachetest
