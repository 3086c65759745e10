package server_test

import (
	"context"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
)

// A host (here: a server holding shard "amber"'s own objects under
// /clusters/{cluster}) serves a cache under /services/cache/ on its own
// port, both stored in one etcd under separate prefixes.
func TestCacheMountedInAHostServesBothOnOnePort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Config{Directory: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()

	hostOpts := options.NewOptions()
	hostOpts.RootDirectory = t.TempDir()
	hostOpts.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL()}
	hostOpts.Etcd.StorageConfig.Prefix = "/shard"
	listener, port, err := genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hostOpts.SecureServing.Listener, hostOpts.SecureServing.BindPort = listener, port
	completedHost, err := hostOpts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	hostCfg, err := server.NewConfig(completedHost)
	if err != nil {
		t.Fatal(err)
	}
	hostCfg.StandIn.PathScoper = filters.ClusterPaths("amber")
	mount := &server.Mount{}
	hostCfg.StandIn.Mount = mount

	cacheOpts := options.NewOptions()
	cacheOpts.RootDirectory = t.TempDir()
	cacheOpts.Etcd.StorageConfig.Transport.ServerList = []string{etcd.ClientURL()}
	completedCache, err := cacheOpts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	hostGeneric := hostCfg.Apiextensions.GenericConfig
	cacheCfg, err := server.NewMountedConfig(completedCache, server.Host{
		LoopbackClientConfig: hostGeneric.LoopbackClientConfig,
		Authenticator:        hostGeneric.Authentication.Authenticator,
		Authorizer:           hostGeneric.Authorization.Authorizer,
	})
	if err != nil {
		t.Fatal(err)
	}

	host, err := hostCfg.Complete().New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mounted, err := cacheCfg.Complete().New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mount.Serve(mounted)
	hostDone, cacheDone := make(chan error, 1), make(chan error, 1)
	go func() { hostDone <- host.PrepareRun().Run(ctx) }()
	go func() { cacheDone <- mounted.PrepareRun().Run(ctx) }()
	defer func() {
		cancel()
		for name, ch := range map[string]chan error{"host": hostDone, "cache": cacheDone} {
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
				t.Errorf("the %s server did not stop", name)
			}
		}
	}()

	hostAdmin := host.AdminConfig()
	waitOK(t, hostAdmin, "/readyz")
	waitOK(t, hostAdmin, "/services/cache/readyz")
	if got, want := mounted.AdminConfig().Host, hostAdmin.Host; got != want {
		t.Errorf("the cache is reached at %s, the host at %s: want one port", got, want)
	}

	local := scopedDynamic(t, hostAdmin, "/clusters/root")
	copies := scopedDynamic(t, mounted.AdminConfig(), "/services/cache/shards/amber/clusters/root")
	eventually(t, func() error {
		_, err := copies.Resource(apiExports).Create(ctx, apiExport("copy", nil), metav1.CreateOptions{})
		return err
	})
	if _, err := local.Resource(apiExports).Create(ctx, apiExport("local", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		client dynamic.Interface
		want   []string
	}{{local, []string{"amber/root/local"}}, {copies, []string{"amber/root/copy"}}} {
		list, err := c.client.Resource(apiExports).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := partitionsOf(list.Items); !reflect.DeepEqual(got, c.want) {
			t.Errorf("list = %v, want %v", got, c.want)
		}
	}

	// The host's own credentials work for the mounted cache too.
	viaHostToken := scopedDynamic(t, hostAdmin, "/services/cache/shards/*/clusters/*")
	if list, err := viaHostToken.Resource(apiExports).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("listing the cache with the host's token: %v (%d items)", err, len(list.Items))
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		waitOK(t, hostAdmin, p)
	}
}

func scopedDynamic(t *testing.T, cfg *rest.Config, prefix string) dynamic.Interface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Host += prefix
	d, err := dynamic.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitOK polls path until it answers 200.
func waitOK(t *testing.T, cfg *rest.Config, path string) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", cfg.Host+path, nil)
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s never answered 200 (last: %s)", path, last)
	}
}
