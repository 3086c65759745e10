//go:build !kcp

package partition

import (
	"context"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// This file is the upstream build: upstream's registry, etcd3 store and
// cacher read no shard or cluster from the context, so these leave it
// alone. storagecontext_kcp.go is the kcp build and says what each is for.

// RequestContext returns ctx unchanged.
func RequestContext(ctx context.Context, _ kcpcache.Scope) context.Context { return ctx }

func storageContext(ctx context.Context, _ kcpcache.Scope) context.Context { return ctx }

func unscopedStorageContext(ctx context.Context) context.Context { return ctx }
