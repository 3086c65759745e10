//go:build kcp

// Package kcpgraph blank-imports every library package of kcp-cache, so that
// `go build -tags kcp ./...` in this module compiles all of them against
// kcp's Kubernetes fork with the kcp build of the server. examples/internal/*
// cannot be imported from here; examples/cache-server/app compiles them. The
// root package (kcpcache) comes with every other; a blank import of it would
// break .ci/run's import-name check.
package kcpgraph

import (
	_ "github.com/kcp-cache/kcp-cache/cache/client"
	_ "github.com/kcp-cache/kcp-cache/cache/fallback"
	_ "github.com/kcp-cache/kcp-cache/cache/hook"
	_ "github.com/kcp-cache/kcp-cache/cache/options"
	_ "github.com/kcp-cache/kcp-cache/cache/replication"
	_ "github.com/kcp-cache/kcp-cache/cache/server"
	_ "github.com/kcp-cache/kcp-cache/cache/server/authentication"
	_ "github.com/kcp-cache/kcp-cache/cache/server/authorization"
	_ "github.com/kcp-cache/kcp-cache/cache/server/backup"
	_ "github.com/kcp-cache/kcp-cache/cache/server/backup/backupfile"
	_ "github.com/kcp-cache/kcp-cache/cache/server/bootstrap"
	_ "github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	_ "github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	_ "github.com/kcp-cache/kcp-cache/cache/server/discovery"
	_ "github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	_ "github.com/kcp-cache/kcp-cache/cache/server/epoch"
	_ "github.com/kcp-cache/kcp-cache/cache/server/filters"
	_ "github.com/kcp-cache/kcp-cache/cache/server/homes"
	_ "github.com/kcp-cache/kcp-cache/cache/server/opaque"
	_ "github.com/kcp-cache/kcp-cache/cache/server/partition"
	_ "github.com/kcp-cache/kcp-cache/cache/server/pki"
	_ "github.com/kcp-cache/kcp-cache/cache/server/ports"
	_ "github.com/kcp-cache/kcp-cache/cache/server/profiler"
	_ "github.com/kcp-cache/kcp-cache/cache/server/removal"
	_ "github.com/kcp-cache/kcp-cache/cache/server/shardmetrics"
	_ "github.com/kcp-cache/kcp-cache/cache/server/standin"
	_ "github.com/kcp-cache/kcp-cache/examples/cache-server/app"
	_ "github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)
