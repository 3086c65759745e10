// Package server builds and runs a kcp cache server: the Kubernetes API of
// apiextensions-apiserver, partitioned by shard and logical cluster, with the
// watch cache on, backed by an embedded or an external etcd.
//
// The flow follows the upstream sample-apiserver:
//
//	opts := options.NewOptions()        // flags via opts.AddFlags
//	completed, _ := opts.Complete()     // then completed.Validate()
//	cfg, _ := server.NewConfig(completed)
//	cfg.Extra.BootstrapCRDs = ...       // what a user sets, before Complete
//	srv, _ := cfg.Complete().New(ctx)   // starts the embedded etcd, if any
//	defer srv.Close()                   // always safe; stops what is still running
//	err := srv.PrepareRun().Run(ctx)    // serves until ctx is done; etcd stops after the server
//
// Config separates the upstream configuration, what a user sets (Extra; and
// StandIn, which the examples and tests use to make a shard stand-in) and
// what NewConfig derived from the options (private). The lifecycle is
// stated on Server.
package server
