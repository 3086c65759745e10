// Package cachetest starts real cache servers for tests and examples, the
// one way this repository starts servers in-process: an embedded etcd (on
// reserved loopback ports, without fsync unless asked) and a cache server
// on a reserved loopback port, standalone or mounted in a host that stands
// in for a kcp shard (package standin makes it one, after New). Tests talk to it with client-go over loopback HTTPS,
// exactly as shards do; nothing is mocked.
//
//	srv := cachetest.StartServer(t)                    // stopped by t.Cleanup; Run's error fails the test
//	srv := cachetest.StartServer(t, cachetest.Mounted("amber"))
//	cfg := srv.ScopedConfig("amber", "root")           // .../services/cache/shards/amber/clusters/root
//	srv.RestartServer(t)                               // same etcd, same address
//	cachetest.Eventually(t, "copied", func(ctx context.Context) error { ... })
//
// etcd accepts only the server's client certificate (passed with the
// external etcd flags), and the server trusts a client CA of the fixture's,
// so tests mint identities:
//
//	amber := srv.ShardConfig(t, "amber")               // client certificate for system:kcp:shard:amber
//	reader := srv.UserConfig(t, "dashboard", kcpcache.ReadersGroup)
//	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) { o.Authentication.TokenAuthFile = path }))
//
// Outside tests, Start and Stop do the same with errors instead of t, and
// StartProcess runs any other server (the examples' shard stand-in) the same
// way: in the background, ready when /readyz answers 200, stopped by Stop,
// which returns Run's error.
package cachetest
