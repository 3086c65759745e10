package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	inprocess "github.com/kcp-cache/kcp-cache/examples/internal/run"
)

// benchServer is a cache server with its etcd, started in this process the
// way examples/cache-server starts one: production options (etcd with fsync,
// watch cache on, etcd prefix /cache), except that every port is a free
// loopback port and the root directory is temporary.
type benchServer struct {
	admin      *rest.Config     // server root, admin token
	etcd       *clientv3.Client // the baseline's client, the fixture's own
	etcdPrefix string
	server     *cachetest.Server
}

func startServer(ctx context.Context, rootDir string, flags []string) (*benchServer, error) {
	// The flags are parsed here already, so that a bad one fails before
	// the server starts.
	o := options.NewOptions()
	if err := applyServerFlags(o, flags); err != nil {
		return nil, err
	}
	// The bench's process is the server's own, as the cache-server
	// command's is: the server's feature gates (its defaults and
	// --feature-gates) are the process's.
	completed, err := o.Complete()
	if err != nil {
		return nil, err
	}
	if err := completed.ApplyFeatureGates(); err != nil {
		return nil, err
	}
	srv, err := inprocess.Cache(ctx, rootDir, 0, func(o *options.Options) {
		// Checked above. They apply over the fixture's settings: flags of
		// ports or directories would move what the bench expects.
		_ = applyServerFlags(o, flags)
	})
	if err != nil {
		return nil, err
	}
	return &benchServer{admin: srv.Config(), etcd: srv.EtcdClient(), etcdPrefix: srv.EtcdPrefix(), server: srv}, nil
}

// applyServerFlags sets the cache server flags args (--name=value) on o,
// as the cache server's command line would.
func applyServerFlags(o *options.Options, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var fss cliflag.NamedFlagSets
	o.AddFlags(&fss)
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	for _, s := range fss.FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("-server-flag: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("-server-flag: not a flag: %v", fs.Args())
	}
	return nil
}

// stop shuts the server and its etcd down; bounded.
func (s *benchServer) stop() error { return s.server.Stop() }
