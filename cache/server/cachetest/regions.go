package cachetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/ports"
)

// Region is one cache of a hierarchy in a test: a server with its own
// embedded etcd, named, peering with the others.
type Region struct {
	Name string
	// Srv is the region's server running in this process; nil for a
	// region in a child process (Proc).
	Srv *Server
	// Proc is the region's server in a child process
	// (RegionsOptions.Processes), which a test can pause; nil otherwise.
	Proc *MemberProcess
	// Opts start the region's server again on its data (and peers).
	Opts Options
	// TokenFile is the cache's --token-auth-file: a line for each cache
	// that reads it, with PeerToken.
	TokenFile string
	// PeerKubeconfigs are the kubeconfigs (--peer) with which the cache
	// reads each of its peers, by the peer's name.
	PeerKubeconfigs map[string]string
}

// RegionsOptions shape the peering of StartRegions; the zero value is a
// full mesh over direct connections.
type RegionsOptions struct {
	// Via rewrites the host through which cache from reaches cache to (a
	// proxy that cuts links); nil: direct.
	Via func(from, to, host string) string
	// PeersWith says whether cache from peers with cache to; nil: every
	// pair.
	PeersWith func(from, to string) bool
	// OwnEmbeddedEtcd makes every cache start its own embedded etcd in
	// <root>/etcd-server, as the binary does, instead of the fixture's:
	// for what only a server's own member has, such as a backup.
	OwnEmbeddedEtcd bool
	// Processes names the caches that run in child processes of the test
	// binary (StartServerProcess), with an etcd of their own in the child:
	// a test can pause them.
	Processes []string
	// Flags, when set, changes the options of the cache named (in-process
	// caches only) once it has its peers, after the fixture's own.
	Flags func(name string, o *options.Options)
}

// PeerToken is the bearer token with which cache from reads cache to.
func PeerToken(from, to string) string { return "peer-" + from + "-reads-" + to }

// StartRegions starts a cache per name, each the peer of the others as o
// says, authenticated as kcpcache.PeerUser with a token; every server
// stops at the test's end.
func StartRegions(t testing.TB, ctx context.Context, ro RegionsOptions, names ...string) map[string]*Region {
	t.Helper()
	regions := map[string]*Region{}
	for _, name := range names {
		port, err := ports.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		var tokens []string
		for _, from := range names {
			if from != name {
				tokens = append(tokens, fmt.Sprintf("%s,%s,%s", PeerToken(from, name), kcpcache.PeerUser(from), from))
			}
		}
		tokenFile := filepath.Join(t.TempDir(), "tokens.csv")
		if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &Region{Name: name, TokenFile: tokenFile, PeerKubeconfigs: map[string]string{}}
		if slices.Contains(ro.Processes, name) {
			r.Proc = StartServerProcess(t, name, r.processArgs(nil))
			regions[name] = r
			continue
		}
		r.Opts = Options{RootDirectory: t.TempDir(), EtcdDirectory: t.TempDir(), Port: port}
		r.Opts.Flags = func(o *options.Options) {
			o.Authentication.TokenAuthFile = tokenFile
			o.Hierarchy.CacheName = name
			o.Hierarchy.FreshnessWait = 3 * time.Second
			if ro.OwnEmbeddedEtcd {
				ownEmbeddedEtcd(o)
			}
		}
		if r.Srv, err = Start(ctx, r.Opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Srv.Stop() })
		regions[name] = r
	}
	// Now that every cache has its serving certificate, give each its peers.
	for _, r := range regions {
		var peers []string
		for _, p := range regions {
			if p == r || (ro.PeersWith != nil && !ro.PeersWith(r.Name, p.Name)) {
				continue
			}
			admin, err := p.Config()
			if err != nil {
				t.Fatal(err)
			}
			cfg := rest.AnonymousClientConfig(admin)
			cfg.BearerToken = PeerToken(r.Name, p.Name)
			if ro.Via != nil {
				cfg.Host = ro.Via(r.Name, p.Name, cfg.Host)
			}
			file := filepath.Join(t.TempDir(), p.Name+".kubeconfig")
			if err := server.WriteKubeconfig(file, cfg); err != nil {
				t.Fatal(err)
			}
			peers = append(peers, p.Name+"="+file)
			r.PeerKubeconfigs[p.Name] = file
		}
		if r.Proc != nil {
			if err := r.Proc.RestartWith(ctx, r.processArgs(peers)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		base := r.Opts.Flags
		r.Opts.Flags = func(o *options.Options) {
			base(o)
			o.Hierarchy.Peers = peers
			if ro.Flags != nil {
				ro.Flags(r.Name, o)
			}
		}
		if err := r.Srv.Restart(ctx, func(o *Options) { o.Flags = r.Opts.Flags }); err != nil {
			t.Fatal(err)
		}
	}
	return regions
}

// Config is an admin configuration of the region's cache, wherever it
// runs.
func (r *Region) Config() (*rest.Config, error) {
	if r.Proc != nil {
		return r.Proc.Config()
	}
	return r.Srv.Config(), nil
}

// processArgs are the flags of a region in a child process: those that
// StartRegions sets for a region in this process, and its peers.
func (r *Region) processArgs(peers []string) []string {
	args := []string{"--token-auth-file=" + r.TokenFile, "--cache-name=" + r.Name, "--freshness-wait=3s"}
	for _, p := range peers {
		args = append(args, "--peer="+p)
	}
	return args
}
