#!/usr/bin/env bash
# kcp-run-cache-server.sh builds kcp with our cache in-process and runs it next to kcp's own
# build, to show that a kcp shard serves, replicates into and reads our cache.
#
#   hack/kcp-run-cache-server.sh /path/to/kcp        # a kcp v0.32.3 source tree (left untouched)
#
# Steps (all under WORK, default a new temporary directory; kept at the end for inspection):
#   1. Copies the kcp tree twice: kcp-stock (unchanged) and kcp-ours, where it requires this
#      checkout (go mod edit -require/-replace) and rewires kcp's in-process cache server:
#      pkg/server/cache.go is replaced (heredoc below) by one that mounts our cache server
#      (cache/server's NewMountedConfig, in an embedded etcd of its own under the root
#      directory's kcp-cache/) at /services/cache/ and runs our replication hook (cache/hook)
#      as the shard's post-start hook; pkg/server/server.go no longer installs kcp's own
#      replication controller when kcp runs that in-process cache, so only our hook writes the
#      shard's partition. Nothing else of kcp changes: its cache client, global informers and
#      every other controller read the mounted cache as they would kcp's.
#   2. Builds both: go build ./cmd/kcp (stock) and go build -tags kcp ./cmd/kcp (ours). Set
#      STOCK_BIN / OURS_BIN to reuse binaries built before.
#   3. Starts each as a standalone root shard on loopback (no --cache-kubeconfig: kcp v0.32.3
#      then runs its in-process cache; it has no --run-cache-server flag), waits for /readyz,
#      waits for the replicated objects to settle and prints, for each, how many objects of
#      each replicated type are in shard root's partition of the cache, side by side.
#
# Needs go, curl and jq. Ports: SECURE_PORT (default 16443) and the two etcd ports after
# ETCD_PORT (default 12379); only one kcp runs at a time.
set -euo pipefail

KCP_DIR=$(cd "${1:?usage: hack/kcp-run-cache-server.sh KCP_DIR}" && pwd)
OURS=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-$(mktemp -d -t kcp-run-cache-server.XXXXXX)}
SECURE_PORT=${SECURE_PORT:-16443}
ETCD_PORT=${ETCD_PORT:-12379}
mkdir -p "$WORK"
echo "work directory: $WORK"

# ---- 1. the two kcp trees -------------------------------------------------------------------
prepare_tree() { # dest
  rm -rf "$1"
  cp -a "$KCP_DIR" "$1"
  chmod -R u+w "$1"
}

patch_tree() { # dir
  local dir=$1
  (cd "$dir" && go mod edit \
    -require=github.com/kcp-cache/kcp-cache@v0.0.0 \
    -replace=github.com/kcp-cache/kcp-cache="$OURS")
  # Our cache instead of kcp's: same method, same caller, same path.
  cat > "$dir/pkg/server/cache.go" <<'EOF'
package server

// Patched by kcp-cache's hack/kcp-run-cache-server.sh: kcp's in-process cache server is
// replaced by kcp-cache's, mounted at the same path, and kcp-cache's hook replicates.

import (
	"context"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	virtualcommandoptions "github.com/kcp-dev/kcp/cmd/virtual-workspaces/options"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	kcpcacheclient "github.com/kcp-cache/kcp-cache/cache/client"
	kcpcachehook "github.com/kcp-cache/kcp-cache/cache/hook"
	kcpcacheoptions "github.com/kcp-cache/kcp-cache/cache/options"
	kcpcachereplication "github.com/kcp-cache/kcp-cache/cache/replication"
	kcpcacheserver "github.com/kcp-cache/kcp-cache/cache/server"
)

// installCacheServer mounts kcp-cache's server at /services/cache/ and
// installs kcp-cache's replication hook for this shard.
func (s *Server) installCacheServer(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("kcp-cache")
	shard := s.Options.Extra.ShardName
	root := filepath.Join(s.Options.GenericControlPlane.SecureServing.ServerCert.CertDirectory, "kcp-cache")

	opts := kcpcacheoptions.NewOptions()
	opts.RootDirectory = root
	opts.EmbeddedEtcd.Directory = filepath.Join(root, "etcd")
	opts.EmbeddedEtcd.ClientPort, opts.EmbeddedEtcd.PeerPort = 0, 0
	completed, err := opts.Complete()
	if err != nil {
		return err
	}
	cfg, err := kcpcacheserver.NewMountedConfig(completed, kcpcacheserver.Host{
		LoopbackClientConfig: s.GenericConfig.LoopbackClientConfig,
		Authenticator:        s.GenericConfig.Authentication.Authenticator,
		Authorizer:           s.GenericConfig.Authorization.Authorizer,
		Shard:                shard,
	})
	if err != nil {
		return err
	}
	mounted, err := cfg.Complete().New(ctx)
	if err != nil {
		return err
	}
	prepared := mounted.PrepareRun()
	s.preHandlerChainMux.Handle(virtualcommandoptions.DefaultRootPathPrefix+"/cache/", mounted.GenericAPIServer.Handler)
	if err := s.AddPostStartHook("kcp-start-cache-server", func(genericapiserver.PostStartHookContext) error {
		go func() {
			if err := prepared.Run(ctx); err != nil {
				logger.Error(err, "kcp-cache server stopped")
			}
		}()
		return nil
	}); err != nil {
		return err
	}

	// The shard's objects, read through kcp's own loopback as kcp's
	// replication controller reads them.
	localClient, err := kcpcacheclient.NewForConfigWithPaths(rest.CopyConfig(s.GenericConfig.LoopbackClientConfig),
		func(scope kcpcache.Scope) string { return "/clusters/" + scope.Cluster })
	if err != nil {
		return err
	}
	local := kcpcacheclient.NewInformerFactory(localClient, kcpcache.Scope{Shard: shard, Cluster: kcpcache.Wildcard}, 0)
	hook, err := kcpcachehook.New(kcpcachehook.Config{
		Shard:        shard,
		CacheConfig:  mounted.HostShardConfig(),
		LocalSources: kcpcachereplication.FactorySources(local),
	})
	if err != nil {
		return err
	}
	return s.AddPostStartHook(kcpcachehook.Name, func(hookCtx genericapiserver.PostStartHookContext) error {
		local.Start(hookCtx)
		return hook.PostStartHook(hookCtx)
	})
}
EOF
  # kcp's replication controller only where the cache is elsewhere: in-process, our hook replicates.
  sed -i 's|^\tif err := s.installReplicationController(ctx, controllerConfig, gvrs); err != nil {|\tif len(s.Options.Cache.Client.KubeconfigFile) == 0 { /* kcp-cache: the hook replicates */ } else if err := s.installReplicationController(ctx, controllerConfig, gvrs); err != nil {|' \
    "$dir/pkg/server/server.go"
  grep -q 'kcp-cache: the hook replicates' "$dir/pkg/server/server.go" || {
    echo "patching pkg/server/server.go failed: kcp's source differs from v0.32.3" >&2; exit 1; }
}

if [ -z "${STOCK_BIN:-}" ] || [ -z "${OURS_BIN:-}" ]; then
  prepare_tree "$WORK/kcp-stock"
  prepare_tree "$WORK/kcp-ours"
  patch_tree "$WORK/kcp-ours"
fi

# ---- 2. the two binaries --------------------------------------------------------------------
if [ -z "${STOCK_BIN:-}" ]; then
  STOCK_BIN=$WORK/kcp-stock.bin
  (cd "$WORK/kcp-stock" && go build -o "$STOCK_BIN" ./cmd/kcp)
fi
if [ -z "${OURS_BIN:-}" ]; then
  OURS_BIN=$WORK/kcp-ours.bin
  (cd "$WORK/kcp-ours" && go build -tags kcp -o "$OURS_BIN" ./cmd/kcp)
fi

# ---- 3. run each, count shard root's partition of its cache ---------------------------------
# The types kcp replicates into the cache (kcp's pkg/reconciler/cache/replication), as
# group/version/resource under /services/cache/shards/root/clusters/*/.
TYPES=(
  apis.kcp.io/v1alpha2/apiexports
  apis.kcp.io/v1alpha1/apiresourceschemas
  apis.kcp.io/v1alpha1/apiconversions
  apis.kcp.io/v1alpha1/apiexportendpointslices
  core.kcp.io/v1alpha1/shards
  cache.kcp.io/v1alpha1/cachedresources
  core.kcp.io/v1alpha1/logicalclusters
  tenancy.kcp.io/v1alpha1/workspacetypes
  rbac.authorization.k8s.io/v1/clusterroles
  rbac.authorization.k8s.io/v1/clusterrolebindings
  admissionregistration.k8s.io/v1/mutatingwebhookconfigurations
  admissionregistration.k8s.io/v1/validatingwebhookconfigurations
  admissionregistration.k8s.io/v1/validatingadmissionpolicies
  admissionregistration.k8s.io/v1/validatingadmissionpolicybindings
)

PID=
stop_kcp() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=; fi; }
trap stop_kcp EXIT

count() { # name type: objects of that type in shard root's partition ("-" when not served)
  local out
  if out=$(kubectl --kubeconfig "$WORK/$1/admin.kubeconfig" --context system:admin get --raw \
    "/services/cache/shards/root/clusters/*/apis/$2" 2>/dev/null); then
    jq '.items | length' <<<"$out"
  else
    echo -
  fi
}

run() { # name binary
  local name=$1 bin=$2 dir=$WORK/$1
  rm -rf "$dir" && mkdir -p "$dir"
  "$bin" start --root-directory="$dir" --bind-address=127.0.0.1 --secure-port="$SECURE_PORT" \
    --embedded-etcd-client-port="$ETCD_PORT" --embedded-etcd-peer-port="$((ETCD_PORT + 1))" \
    --v=2 >"$dir/kcp.log" 2>&1 &
  PID=$!
  local start=$SECONDS
  until kubectl --kubeconfig "$dir/admin.kubeconfig" --context system:admin get --raw /readyz >/dev/null 2>&1; do
    kill -0 "$PID" 2>/dev/null || { echo "$name: kcp exited, see $dir/kcp.log" >&2; tail -20 "$dir/kcp.log" >&2; exit 1; }
    [ $((SECONDS - start)) -lt 300 ] || { echo "$name: not ready after 300s, see $dir/kcp.log" >&2; exit 1; }
    sleep 2 # polling a child process's readiness, with the deadline above
  done
  echo "$name: /readyz ok after $((SECONDS - start))s"
  # Settled: the counts are the same twice, 10s apart.
  local prev= cur
  while :; do
    cur=$(for t in "${TYPES[@]}"; do count "$name" "$t"; done | tr '\n' ' ')
    [ "$cur" != "$prev" ] || break
    [ $((SECONDS - start)) -lt 300 ] || break
    prev=$cur
    sleep 10 # waiting for replication to settle, with the deadline above
  done
  echo "$cur" >"$dir/counts"
  kubectl --kubeconfig "$dir/admin.kubeconfig" --context system:admin get --raw /readyz?verbose >"$dir/readyz" 2>&1 || true
  stop_kcp
}

run stock "$STOCK_BIN"
run ours "$OURS_BIN"

read -r -a stock <"$WORK/stock/counts"
read -r -a ours <"$WORK/ours/counts"
printf '%-66s %8s %8s\n' "shard root's partition of the in-process cache" "kcp's" "ours"
for i in "${!TYPES[@]}"; do
  printf '%-66s %8s %8s\n' "${TYPES[$i]}" "${stock[$i]}" "${ours[$i]}"
done
