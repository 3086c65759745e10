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
// Each step only does its own part: NewConfig derives from the options
// without writing into them; Complete snapshots the Config with defaults and
// changes nothing; New builds a server (its data plane, its epoch, its
// handler chain on a copy of the upstream configuration) without writing
// into the CompletedConfig. Config separates the upstream configuration,
// what a user sets (Extra) and what NewConfig derived from the options
// (private). The lifecycle and the shutdown order are stated on Server and
// Close.
//
// This package holds only that lifecycle and its wiring, one file per role:
//
//   - config.go: Config and its parts, Host, NewConfig, NewMountedConfig
//     and Complete;
//   - apply.go: newConfig, the list of translators, and every translator,
//     one per group of options (storage, the embedded etcd, serving
//     standalone or mounted, authentication and authorization, limits,
//     removal, the hierarchy);
//   - server.go: New, Run and Close (and PrepareRun);
//   - loops.go: the one owner of the server's background loops, and the list
//     of them;
//   - handler.go: the handler chain around upstream's;
//   - plane.go: what the data plane serves from the start, its readiness
//     and its request limit;
//   - mount.go: serving mounted in a host (Mount; RunIn ties the cache to a
//     host server's start and shutdown, RunMounted runs both);
//   - kubeconfig.go: the admin client configuration and kubeconfig;
//   - etcd.go: the one etcd client of the server's own work, the embedded
//     member's identity and its end, the epoch;
//   - hierarchy.go: the cache's place in a hierarchy, wired from packages
//     homes and mirror: its table of home claims and where it persists
//     them, its peers' mirror, the loop that runs both, the home revision
//     tracker's paths;
//   - backup.go: the online backup's path;
//   - apiextensions_upstream.go / apiextensions_kcp.go: apiextensions'
//     ExtraConfig and CRD informer for upstream and (build tag kcp) for kcp's
//     Kubernetes fork; crdlister_kcp.go: the fork's cluster-aware CRD lister.
//
// What the server is made of lives in the subpackages: bootstrap (declared
// types), epoch, authentication, authorization, filters, partition,
// dataplane, opaque, discovery, removal, shardmetrics, embeddedetcd, homes
// (every named cache's table of home claims and the admission of writes by
// it), mirror (a cache with peers: copies of their partitions, by the
// claims), homerevision; its tests in integration, through the fixture
// cachetest.
package server
