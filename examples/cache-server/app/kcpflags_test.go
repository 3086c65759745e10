package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// kcpCacheServerFlags is every flag kcp's cache-server binary accepts, at
// kcp v0.32.3 and on kcp main (2026-08; the flag set is the same), each with
// a value it accepts, grouped by the file that registers it. kcp's
// pkg/cache/server/options/options.go AddFlags registers the etcd, embedded
// etcd, secure serving, authentication, authorization and logging flags and
// --synthetic-delay; cmd/cache-server/main.go parses --root-directory itself
// and hands the rest to cobra (cli.Run adds nothing: its klog flags are the
// logging flags below; cobra adds --help).
var kcpCacheServerFlags = map[string][]string{
	// kcp cmd/cache-server/main.go
	"cmd/cache-server/main.go": {"--root-directory=.kcp-cache"},
	// kcp pkg/cache/server/options/options.go
	"pkg/cache/server/options/options.go": {"--synthetic-delay=0s"},
	// kcp pkg/cache/server/options/authentication.go
	"pkg/cache/server/options/authentication.go": {"--client-ca-file=/etc/kcp/ca.crt"},
	// kcp pkg/cache/server/options/authorization.go
	"pkg/cache/server/options/authorization.go": {"--authorization-always-allow-paths=/healthz,/readyz,/livez"},
	// github.com/kcp-dev/embeddedetcd options/embedded.go (kcp's go.mod:
	// v1.1.1-0.20260402110232-2cc5c5cce35e)
	"embeddedetcd/options/embedded.go": {
		"--embedded-etcd-directory=/var/etcd",
		"--embedded-etcd-peer-port=2380",
		"--embedded-etcd-client-port=2379",
		"--embedded-etcd-listen-metrics-urls=http://localhost:2381",
		"--embedded-etcd-wal-size-bytes=0",
		"--embedded-etcd-quota-backend-bytes=0",
		"--embedded-etcd-force-new-cluster=false",
	},
	// k8s.io/apiserver pkg/server/options/etcd.go (kcp's fork, 1.36-based;
	// the same names as upstream v0.37.2)
	"apiserver/pkg/server/options/etcd.go": {
		"--etcd-servers-overrides=",
		"--storage-media-type=application/json",
		"--delete-collection-workers=1",
		"--enable-garbage-collector=true",
		"--watch-cache=false",
		"--default-watch-cache-size=100",
		"--watch-cache-sizes=",
		"--storage-backend=etcd3",
		"--etcd-servers=",
		"--etcd-prefix=/registry",
		"--etcd-keyfile=",
		"--etcd-certfile=",
		"--etcd-cafile=",
		"--encryption-provider-config=",
		"--encryption-provider-config-automatic-reload=false",
		"--etcd-compaction-interval=5m0s",
		"--etcd-count-metric-poll-period=1m0s",
		"--etcd-db-metric-poll-interval=30s",
		"--etcd-healthcheck-timeout=2s",
		"--etcd-readycheck-timeout=2s",
		"--lease-reuse-duration-seconds=60",
	},
	// k8s.io/apiserver pkg/server/options/serving.go (kcp's fork)
	"apiserver/pkg/server/options/serving.go": {
		"--bind-address=127.0.0.1",
		"--secure-port=6443",
		"--disable-http2-serving=false",
		"--cert-dir=/tmp/certs",
		"--tls-cert-file=/etc/kcp/tls.crt",
		"--tls-private-key-file=/etc/kcp/tls.key",
		"--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
		"--tls-curve-preferences=23",
		"--tls-min-version=VersionTLS12",
		"--tls-sni-cert-key=/etc/kcp/sni.crt,/etc/kcp/sni.key:cache.example.com",
		"--http2-max-streams-per-connection=0",
		"--permit-port-sharing=false",
		"--permit-address-sharing=false",
	},
	// k8s.io/component-base logs/api/v1/options.go (kcp's fork; the JSON
	// flags exist because kcp imports pkg/logging/json/register)
	"component-base/logs/api/v1/options.go": {
		"--logging-format=json",
		"--log-flush-frequency=5s",
		"-v=4",
		"--vmodule=server=2",
		"--log-text-split-stream=false",
		"--log-text-info-buffer-size=0",
		"--log-json-split-stream=false",
		"--log-json-info-buffer-size=0",
	},
}

// The argument lists kcp's cache is started with in practice.
var kcpArgumentLists = map[string][]string{
	// kcp-operator: its CacheServer resource (embedded etcd, then external),
	// kcp-operator internal/resources/compiledcacheserver/deployment.go getArgs.
	"kcp-operator embedded etcd": {"--tls-cert-file=/etc/cache-server/tls/server/tls.crt", "--tls-private-key-file=/etc/cache-server/tls/server/tls.key",
		"--root-directory=", "--client-ca-file=/etc/cache-server/tls/ca/root/tls.crt", "--embedded-etcd-directory=/var/etcd", "-v=2"},
	"kcp-operator external etcd": {"--tls-cert-file=/etc/cache-server/tls/server/tls.crt", "--tls-private-key-file=/etc/cache-server/tls/server/tls.key",
		"--root-directory=", "--client-ca-file=/etc/cache-server/tls/ca/root/tls.crt", "--etcd-servers=https://etcd:2379", "--etcd-prefix=/cache",
		"--etcd-cafile=/etc/cache-server/etcd/ca.crt", "--etcd-certfile=/etc/cache-server/etcd/tls.crt", "--etcd-keyfile=/etc/cache-server/etcd/tls.key", "-v=2"},
	// kcp-dev/helm-charts charts/cache/templates/cache-deployment.yaml, with
	// profiling on (kcp's own cache-server has no --profiler-address).
	"kcp helm chart": {"--embedded-etcd-client-port=8010", "--embedded-etcd-peer-port=8011", "--secure-port=8012", "--synthetic-delay=0s",
		"--tls-private-key-file=/etc/cache/tls/server/tls.key", "--tls-cert-file=/etc/cache/tls/server/tls.crt", "--v=2", "--profiler-address=0.0.0.0:6060"},
	// kcp cmd/sharded-test-server/cache.go (embedded etcd, then external).
	"sharded-test-server embedded etcd": {"--root-directory=.kcp/.kcp-cache", "--bind-address=127.0.0.1", "--secure-port=8012",
		"--synthetic-delay=0s", "--client-ca-file=.kcp/client-ca.crt", "--embedded-etcd-client-port=8010", "--embedded-etcd-peer-port=8011"},
	"sharded-test-server external etcd": {"--root-directory=.kcp/.kcp-cache", "--bind-address=127.0.0.1", "--secure-port=8012",
		"--synthetic-delay=0s", "--client-ca-file=.kcp/client-ca.crt", "--etcd-servers=https://127.0.0.1:2379", "--etcd-prefix=/cache"},
}

// Every kcp cache-server flag, and every argument list kcp's tooling uses,
// parses; and the help of each flag that has no effect here says so.
func TestKcpCacheServerFlagsParse(t *testing.T) {
	cases := map[string][]string{}
	for file, args := range kcpCacheServerFlags {
		for _, a := range args {
			cases[file+" "+a] = []string{a}
		}
	}
	for name, args := range kcpArgumentLists {
		cases[name] = args
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := NewCommand()
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		})
	}
	cmd := NewCommand()
	for _, name := range []string{"watch-cache", "enable-garbage-collector", "watch-cache-sizes", "etcd-servers-overrides",
		"storage-media-type", "encryption-provider-config", "encryption-provider-config-automatic-reload"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || !strings.Contains(f.Usage, "Accepted for compatibility with kcp's cache-server") {
			t.Errorf("--%s is not listed in help as accepted for compatibility", name)
		}
	}
	// cobra answers --help (kcp's only other flag) by printing the help.
	if err := cmd.ParseFlags([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: %v, want pflag.ErrHelp", err)
	}
}
