// Package server builds and runs a kcp cache server: the Kubernetes API of
// apiextensions-apiserver, partitioned by shard and logical cluster, with the
// watch cache on, backed by an embedded or an external etcd.
//
// The flow follows the upstream sample-apiserver:
//
//	opts := options.NewOptions()        // flags via opts.AddFlags
//	completed, _ := opts.Complete()     // then completed.Validate()
//	cfg, _ := server.NewConfig(completed)
//	srv, _ := cfg.Complete().New(ctx)   // starts the embedded etcd, if any
//	err := srv.PrepareRun().Run(ctx)    // serves until ctx is done
package server
