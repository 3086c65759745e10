// Package embeddedetcd runs an etcd member inside the cache server process,
// so that a cache server needs no set-up: data lives under a directory, the
// member listens on loopback only, and watch progress notifications are on so
// that the apiserver's watch cache can serve consistent reads. In-memory
// members of several cache servers can form one cluster, a Group (group.go):
// those also listen where their group reaches them.
//
//	srv, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Directory: "/var/lib/cache/etcd"})
//	if err != nil { ... }
//	defer srv.Close()
//	endpoints := []string{srv.ClientURL()}
package embeddedetcd
