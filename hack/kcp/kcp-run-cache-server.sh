#!/usr/bin/env bash
# kcp-run-cache-server.sh patches kcp so that our library is kcp's in-process cache behind one
# flag, builds that kcp, and runs it with the flag off (kcp's own cache) and on (ours), to show
# that a kcp shard serves, replicates into and reads our cache.
#
#   hack/kcp/kcp-run-cache-server.sh /path/to/kcp        # a kcp v0.32.3 source tree (left untouched)
#   PATCH_ONLY=1 hack/kcp/kcp-run-cache-server.sh /path/to/kcp   # only patch, print the patch's size
#
# Steps (all under WORK, default a new temporary directory; kept at the end for inspection):
#   1. Copies the kcp tree to kcp-patched and applies hack/kcp/kcp-in-process.patch (its size is
#      printed): --run-cache-server, without --cache-kubeconfig, mounts our cache
#      server (NewMountedConfig, an embedded etcd of its own under the root directory's
#      kcp-cache/) at /services/cache/ where kcp mounts its own, and installs our replication
#      hook (hook.Install) instead of kcp's replication controller; both stop from the shard's
#      pre-shutdown hooks (Server.RunIn). Nothing else of kcp changes: its cache client, global
#      informers and every other controller read the mounted cache as they would kcp's.
#   2. Builds it: go build -tags kcp ./cmd/kcp. Set KCP_BIN to reuse a binary built before.
#   3. Starts it as a standalone root shard on loopback (no --cache-kubeconfig: the in-process
#      cache), flag off, then flag on; waits for /readyz and for the replicated objects to
#      settle, and counts the objects of each replicated type in shard root's partition of the
#      cache (/services/cache/shards/root/clusters/*/...).
#   4. Unless NO_SECOND_SHARD is set, starts a second shard shard-1 (flag off, so kcp's own
#      replication) with --cache-kubeconfig pointing at that root's cache (root's shard-admin
#      credentials) and --root-shard-kubeconfig-file at root's admin kubeconfig, waits for its
#      /readyz and counts its partition, shard-1, in the same cache. Prints the four columns
#      side by side and exits 1 when shard root's partition differs between kcp's cache and ours.
#
# Needs go, kubectl and jq. Ports on 127.0.0.1: SECURE_PORT (default 16443) and +1 for
# shard-1; embedded etcd ETCD_PORT (default 12379) and +1, peers +100. One run at a time.
set -euo pipefail

KCP_DIR=$(cd "${1:?usage: hack/kcp/kcp-run-cache-server.sh KCP_DIR}" && pwd)
OURS=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-$(mktemp -d -t kcp-run-cache-server.XXXXXX)}
SECURE_PORT=${SECURE_PORT:-16443}
ETCD_PORT=${ETCD_PORT:-12379}
mkdir -p "$WORK"
echo "work directory: $WORK"

# ---- 1. the patched kcp tree ----------------------------------------------------------------
prepare_tree() { # dest: a writable copy of the kcp tree, without its binaries
  rm -rf "$1"
  mkdir -p "$1"
  tar -C "$KCP_DIR" --exclude=./bin --exclude=./.git -cf - . | tar -C "$1" -xf -
  chmod -R u+w "$1"
}

# patch_tree makes our library kcp's in-process cache behind one flag, --run-cache-server: off,
# kcp runs its own in-process cache and replication controller as before; on (and no
# --cache-kubeconfig), it mounts our cache server at the same path and our hook replicates.
# The change is hack/kcp/kcp-in-process.patch (one new file, pkg/server/kcpcache.go, the flag in
# kcp's cache options and the choice in pkg/server/server.go) plus our module in go.mod, which
# go mod edit writes because its path is this checkout's. It prints the patch's size.
patch_tree() { # dir
  local dir=$1
  (cd "$dir" && patch -p1 --quiet --forward <"$OURS/hack/kcp/kcp-in-process.patch") || {
    echo "hack/kcp/kcp-in-process.patch does not apply: kcp's source differs from v0.32.3" >&2
    exit 1
  }
  (cd "$dir" && go mod edit \
    -require=github.com/kcp-cache/kcp-cache@v0.0.0 \
    -replace=github.com/kcp-cache/kcp-cache="$OURS")
  local p=$OURS/hack/kcp/kcp-in-process.patch
  # Counted as diffstat counts (blank lines too): every +/- line of a hunk, not the headers.
  awk '/^(\+\+\+|---) /{if (/^\+\+\+/) files++; next} /^\+/{added++} /^-/{removed++}
    END{printf "patch of kcp v0.32.3 (hack/kcp/kcp-in-process.patch): %d files, %d lines added, %d removed;" \
      " go.mod: 2 lines (require, replace)\n", files, added, removed}' "$p"
}

if [ -z "${KCP_BIN:-}" ] || [ -n "${PATCH_ONLY:-}" ]; then
  prepare_tree "$WORK/kcp-patched"
  patch_tree "$WORK/kcp-patched"
fi
[ -z "${PATCH_ONLY:-}" ] || exit 0

# ---- 2. the binary --------------------------------------------------------------------------
if [ -z "${KCP_BIN:-}" ]; then
  KCP_BIN=$WORK/kcp.bin
  (cd "$WORK/kcp-patched" && go build -tags kcp -o "$KCP_BIN" ./cmd/kcp)
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

PIDS=()
stop_all() { local p; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; PIDS=(); }
trap stop_all EXIT

count() { # kubeconfig shard type: objects of that type in the shard's partition ("-" when not served)
  local out
  if out=$(kubectl --kubeconfig "$1" get --raw "/services/cache/shards/$2/clusters/*/apis/$3" 2>/dev/null); then
    jq '.items | length' <<<"$out"
  else
    echo -
  fi
}

start_kcp() { # dir port binary args...: starts kcp, waits for its /readyz
  local dir=$1 port=$2 bin=$3
  shift 3
  mkdir -p "$dir"
  "$bin" start --root-directory="$dir" --bind-address=127.0.0.1 --secure-port="$port" \
    --embedded-etcd-client-port="$((port - SECURE_PORT + ETCD_PORT))" \
    --embedded-etcd-peer-port="$((port - SECURE_PORT + ETCD_PORT + 100))" \
    --v=2 "$@" >"$dir/kcp.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local start=$SECONDS
  until kubectl --kubeconfig "$dir/admin.kubeconfig" --context system:admin get --raw /readyz >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { echo "$dir: kcp exited, see $dir/kcp.log" >&2; tail -20 "$dir/kcp.log" >&2; return 1; }
    [ $((SECONDS - start)) -lt 300 ] || { echo "$dir: not ready after 300s, see $dir/kcp.log" >&2; return 1; }
    sleep 2 # polling a child process's readiness, with the deadline above
  done
  echo "$dir: /readyz ok after $((SECONDS - start))s"
}

settled_counts() { # kubeconfig shard: the counts once they are the same twice, 10s apart
  local prev= cur start=$SECONDS
  while :; do
    cur=$(for t in "${TYPES[@]}"; do count "$1" "$2" "$t"; done | tr '\n' ' ')
    [ "$cur" != "$prev" ] || break
    [ $((SECONDS - start)) -lt 300 ] || break
    prev=$cur
    sleep 10 # waiting for replication to settle, with the deadline above
  done
  echo "$cur"
}

run() { # name flags...: root with these flags
  local name=$1 dir=$WORK/$1
  shift
  rm -rf "$dir"
  start_kcp "$dir/root" "$SECURE_PORT" "$KCP_BIN" "$@"
  # The in-process cache, as root's shard admin (system:masters): kcp's cache client adds
  # /services/cache itself, so the server is the shard's bare address.
  kubectl --kubeconfig "$dir/root/admin.kubeconfig" config view --raw --flatten --minify --context system:admin >"$dir/cache.kubeconfig"
  kubectl --kubeconfig "$dir/cache.kubeconfig" config set-cluster "$(kubectl --kubeconfig "$dir/cache.kubeconfig" config view -o jsonpath='{.clusters[0].name}')" \
    --server="https://127.0.0.1:$SECURE_PORT" >/dev/null
  settled_counts "$dir/cache.kubeconfig" root >"$dir/counts-root"
  kubectl --kubeconfig "$dir/root/admin.kubeconfig" --context system:admin get --raw '/readyz?verbose' >"$dir/root/readyz" 2>&1 || true
  if [ -z "${NO_SECOND_SHARD:-}" ]; then
    # An unpatched kcp shard using that cache: it reads root's objects from it (its
    # global informers) and replicates its own into partition shard-1.
    if start_kcp "$dir/shard-1" "$((SECURE_PORT + 1))" "$KCP_BIN" --shard-name=shard-1 \
      --root-shard-kubeconfig-file="$dir/root/admin.kubeconfig" --cache-kubeconfig="$dir/cache.kubeconfig"; then
      settled_counts "$dir/cache.kubeconfig" shard-1 >"$dir/counts-shard-1"
      # Read: shard-1's kcp-start-informers waits for its informers on the cache (root's
      # APIExports, Shards, WorkspaceTypes...) to sync. Written back: root's Shard object for
      # shard-1, replicated into root's partition.
      echo "$name: shard-1 $(kubectl --kubeconfig "$dir/shard-1/admin.kubeconfig" --context system:admin get --raw '/readyz?verbose' | grep kcp-start-informers)"
      echo "$name: shards in root's partition after shard-1 joined: $(kubectl --kubeconfig "$dir/cache.kubeconfig" get --raw \
        '/services/cache/shards/root/clusters/*/apis/core.kcp.io/v1alpha1/shards' | jq -c '[.items[].metadata.name]')"
    else
      for t in "${TYPES[@]}"; do echo -n "x "; done >"$dir/counts-shard-1"
    fi
  fi
  stop_all
}

run stock
run ours --run-cache-server

# Side by side: shard root's and shard-1's partitions of root's in-process cache, kcp's and ours
# ("-": not served, "x": shard-1 did not become ready).
read -r -a stock_root <"$WORK/stock/counts-root"
read -r -a ours_root <"$WORK/ours/counts-root"
read -r -a stock_s1 <"$WORK/stock/counts-shard-1" 2>/dev/null || stock_s1=()
read -r -a ours_s1 <"$WORK/ours/counts-shard-1" 2>/dev/null || ours_s1=()
printf '%-62s %12s %12s %12s %12s\n' "type" "root(kcp's)" "root(ours)" "shard-1(kcp's)" "shard-1(ours)"
for i in "${!TYPES[@]}"; do
  printf '%-62s %12s %12s %12s %12s\n' "${TYPES[$i]}" "${stock_root[$i]}" "${ours_root[$i]}" "${stock_s1[$i]:-}" "${ours_s1[$i]:-}"
done

# The proof fails when shard root's partition differs between kcp's cache and ours.
if [ "${stock_root[*]}" != "${ours_root[*]}" ]; then
  echo "shard root's partition differs between kcp's in-process cache and ours" >&2
  exit 1
fi
