#!/usr/bin/env bash
# kcp-region-outage.sh takes a region away from a running kcp and measures what its users keep.
#
# In kcp's sharded test environment split in two regions (hack/kcp/kcp-e2e.sh's "regions": the root
# shard pushes to cache east, shard-1 to cache west, the caches mirror each other) it sets up,
# with kcp's own client (kubectl through the front-proxy, as kcp-admin):
#
#   root:provider  a workspace on the root shard exporting widgets.example.io and gadgets.example.io
#   root:consumer  a workspace on shard-1 bound to widgets.example.io, holding two widgets
#
# then stops the root shard and cache east together, runs every check (reads and writes a user
# makes, through the front-proxy and at shard-1; what west serves of root's partition), brings
# east and the root shard back, and runs the checks again, with what must have converged. It
# prints a table: each check, its result during the outage and after the return.
#
#   hack/kcp/kcp-region-outage.sh /path/to/kcp        # kcp's binaries in KCP_DIR/bin (see kcp-e2e.sh)
#   SKIP_KCP_BUILD=1 hack/kcp/kcp-region-outage.sh /path/to/kcp
#   FRONT_PROXY_BIN=/path/kcp-front-proxy hack/kcp/kcp-region-outage.sh /path/to/kcp
#       # kcp's front-proxy built with hack/kcp/kcp-front-proxy-fallback.patch, its read-only
#       # fallback reading west, and examples/replicator keeping the root shard's user-read
#       # partition for root and root:provider (docs/fallback.md): the users' rows change
#
# The environment uses kcp's fixed ports; the script holds /tmp/kcp-ports.lock while it runs.
set -euo pipefail

if [ -z "${KCP_OUTAGE_LOCKED:-}" ]; then
	KCP_OUTAGE_LOCKED=1 exec flock /tmp/kcp-ports.lock "$0" "$@"
fi

HERE=$(cd "$(dirname "$0")/../.." && pwd)
export OUT=${OUT:-$HERE/.kcp-region-outage}
# kcp-e2e.sh's env_start and env_stop, and the binaries it builds.
KCP_E2E_LIB=1
# shellcheck source=hack/kcp/kcp-e2e.sh
source "$HERE/hack/kcp/kcp-e2e.sh" "$@"

REPLICATOR_PID=""
if [ -n "${FRONT_PROXY_BIN:-}" ]; then
	log "building the user-read replicator; the front-proxy is $FRONT_PROXY_BIN with its fallback reading west"
	(cd "$HERE" && CGO_ENABLED=0 go build -o "$OUT/bin/replicator" ./examples/replicator)
	cat >"$OUT/bin/fallback-front-proxy" <<EOF
#!/usr/bin/env bash
for a in "\$@"; do case \$a in --root-directory=*) work=\$(dirname "\${a#--root-directory=}") ;; esac; done
exec $(printf %q "$FRONT_PROXY_BIN") "\$@" --cache-fallback-kubeconfig="\$work/.kcp-cache-west/cache.kubeconfig"
EOF
	chmod +x "$OUT/bin/fallback-front-proxy"
	export KCP_ASSET_KCP_FRONT_PROXY="$OUT/bin/fallback-front-proxy"
fi
env_start regions
cleanup() {
	[ -n "$REPLICATOR_PID" ] && kill "$REPLICATOR_PID" 2>/dev/null || true
	env_stop
}
trap cleanup EXIT
W=$env_work
REGIONS="$HERE/hack/kcp/kcp-regions.sh"
RESULTS="$OUT/outage.tsv"
: >"$RESULTS"

# k PATH ARGS...: kubectl in the workspace PATH through the front-proxy, as kcp-admin.
k() {
	local path=$1
	shift
	kubectl --kubeconfig="$W/.kcp/admin.kubeconfig" --context=root --request-timeout=15s \
		--server="https://127.0.0.1:6443/clusters/$path" "$@"
}

# k1 CLUSTER ARGS...: kubectl at shard-1 itself, in a logical cluster, as kcp-admin.
k1() {
	local cluster=$1
	shift
	kubectl --kubeconfig="$W/.kcp-1/admin.kubeconfig" --context=root --request-timeout=15s \
		--server="https://127.0.0.1:6445/clusters/$cluster" "$@"
}

# cache CACHE PATH: GET PATH at a cache (east or west) with the shards' certificate; prints the
# HTTP code and the cache's headers on the first line, the body after it.
cache() {
	local port=8012 root="$W/.kcp-cache"
	[ "$1" = west ] && port=8022 && root="$W/.kcp-cache-west"
	curl -s --max-time 15 --cacert "$root/apiserver.crt" --cert "$W/.kcp-cache/cache-client.crt" \
		--key "$W/.kcp-cache/cache-client.key" -D "$OUT/headers" -o "$OUT/body" \
		"https://localhost:$port/services/cache$2" >/dev/null || true
	printf '%s %s\n' "$(sed -n 's/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' "$OUT/headers" | tail -1)" \
		"$(grep -i '^kcp-cache-' "$OUT/headers" | tr -d '\r' | paste -sd' ' -)"
	cat "$OUT/body"
}

# count: the number of items of a list read from stdin (after cache's header line).
count() { tail -n +2 | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("items",[])))' 2>/dev/null || echo "?"; }

# until_ok SECONDS CMD...: run CMD until it succeeds, at most SECONDS.
until_ok() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 1
	done
}

# check PHASE NAME CMD...: run CMD once, record whether it succeeded, what it printed (its last
# line) and how long it took.
check() {
	local phase=$1 name=$2 out rc=0 start end
	shift 2
	start=$(date +%s.%N)
	out=$("$@" 2>&1) || rc=$?
	end=$(date +%s.%N)
	out=$(printf '%s' "$out" | tail -1 | tr '\t|' '  ' | cut -c1-110)
	local res=works
	[ $rc -ne 0 ] && res=fails
	printf '%s\t%s\t%s\t%s\t%.1f\n' "$phase" "$name" "$res" "$out" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')" >>"$RESULTS"
	log "[$phase] $name: $res ($out)"
}

ws_ready() { [ "$(k root get workspace "$1" -o jsonpath='{.status.phase}')" = Ready ]; }
bound() { [ "$(k root:consumer get apibinding "$1" -o jsonpath='{.status.phase}')" = Bound ]; }

log "setting up root:provider (root shard) and root:consumer (shard-1)"
k root apply -f - >/dev/null <<EOF
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: provider
spec:
  location:
    selector:
      matchLabels:
        name: root
---
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: consumer
spec:
  location:
    selector:
      matchLabels:
        name: shard-1
EOF
until_ok 300 ws_ready provider
until_ok 300 ws_ready consumer
PROVIDER=$(k root get workspace provider -o jsonpath='{.spec.cluster}')
CONSUMER=$(k root get workspace consumer -o jsonpath='{.spec.cluster}')
log "root:provider is logical cluster $PROVIDER, root:consumer is $CONSUMER"

schema() {
	cat <<EOF
apiVersion: apis.kcp.io/v1alpha1
kind: APIResourceSchema
metadata:
  name: v1.$1.example.io
spec:
  group: example.io
  names: {kind: $2, listKind: ${2}List, plural: $1, singular: ${1%s}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      type: object
      properties:
        spec: {type: object, properties: {size: {type: integer}}}
---
apiVersion: apis.kcp.io/v1alpha2
kind: APIExport
metadata:
  name: $1.example.io
spec:
  resources:
  - {name: $1, group: example.io, schema: v1.$1.example.io, storage: {crd: {}}}
EOF
}
{ schema widgets Widget; echo ---; schema gadgets Gadget; } | k root:provider apply -f - >/dev/null
# An export's identity is filled in by the root shard; bind once it is.
until_ok 120 k root:provider get apiexport widgets.example.io -o jsonpath='{.status.identityHash}'
binding() {
	cat <<EOF
apiVersion: apis.kcp.io/v1alpha2
kind: APIBinding
metadata:
  name: $1
spec:
  reference:
    export: {path: root:provider, name: $1.example.io}
EOF
}
binding widgets | k root:consumer apply -f - >/dev/null
until_ok 300 bound widgets
until_ok 60 k root:consumer get widgets -n default
for w in w1 w2; do
	printf 'apiVersion: example.io/v1\nkind: Widget\nmetadata: {name: %s, namespace: default}\nspec: {size: 1}\n' "$w" |
		k root:consumer create -f - >/dev/null
done
if [ -n "${FRONT_PROXY_BIN:-}" ]; then
	"$OUT/bin/replicator" --shard-name=root --kubeconfig="$W/.kcp-0/admin.kubeconfig" \
		--cache-kubeconfig="$W/.kcp-cache/cache.kubeconfig" --user-read-workspaces=root,root:provider \
		>"$W/logs/replicator.log" 2>&1 &
	REPLICATOR_PID=$!
	user_read_at_west() {
		cache west "/shards/root:readonly/clusters/system:cache-heartbeat/apis/cache.kcp.io/v1alpha1/shardheartbeats/root:readonly" |
			tail -n +2 | python3 -c 'import json,sys; s=json.load(sys.stdin)["spec"]; sys.exit(0 if s.get("converged") and s.get("epoch") else 1)'
	}
	until_ok 180 user_read_at_west
fi
# The export and its schema reach west through east's mirror.
provider_exports_at_west() { [ "$(cache west "/shards/root/clusters/$PROVIDER/apis/apis.kcp.io/v1alpha2/apiexports" | count)" = 2 ]; }
until_ok 120 provider_exports_at_west

# The checks, run in each phase.
widget() { printf 'apiVersion: example.io/v1\nkind: Widget\nmetadata: {name: %s, namespace: default}\nspec: {size: 2}\n' "$1"; }
has_items() { local n; n=$("$@" | count); [ "$n" != "?" ] && [ "$n" -gt 0 ] && echo "$n objects"; }
code_is() { local want=$1 got; shift; got=$("$@" | head -1); echo "$got"; [ "${got%% *}" = "$want" ]; }
# A stale read is what kcp's informers do (resourceVersion=0); a consistent read has none.
stale() { cache "$1" "$2?resourceVersion=0"; }

run_checks() {
	local phase=$1 n=$2
	check "$phase" "list widgets in root:consumer (front-proxy)" k root:consumer get widgets -n default -o name
	check "$phase" "list widgets in root:consumer at shard-1" k1 "$CONSUMER" get widgets -n default -o name
	check "$phase" "APIBinding widgets in root:consumer is Bound (front-proxy)" bound widgets
	check "$phase" "APIBinding widgets in root:consumer, phase at shard-1" k1 "$CONSUMER" get apibinding widgets -o jsonpath='{.status.phase}'
	check "$phase" "widgets served in root:consumer's discovery" bash -c "$(declare -f k); W=$W; k root:consumer api-resources --api-group=example.io -o name | grep -x widgets.example.io"
	check "$phase" "create a widget in root:consumer" bash -c "$(declare -f k widget); W=$W; widget w-$n | k root:consumer create -f - -o name"
	check "$phase" "update a widget in root:consumer" k root:consumer patch widget w1 -n default --type=merge -p "{\"spec\":{\"size\":$((n + 10))}}" -o name
	check "$phase" "west: root's APIExports of root:provider, stale read" has_items stale west "/shards/root/clusters/$PROVIDER/apis/apis.kcp.io/v1alpha2/apiexports"
	check "$phase" "west: root's APIResourceSchemas of root:provider, stale read" has_items stale west "/shards/root/clusters/$PROVIDER/apis/apis.kcp.io/v1alpha1/apiresourceschemas"
	check "$phase" "west: root's WorkspaceTypes (root:organization, ...), stale read" has_items stale west "/shards/root/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspacetypes"
	check "$phase" "west: root's Shards, stale read" has_items stale west "/shards/root/clusters/root/apis/core.kcp.io/v1alpha1/shards"
	check "$phase" "west: root's APIExports, consistent read" code_is 200 cache west "/shards/root/clusters/$PROVIDER/apis/apis.kcp.io/v1alpha2/apiexports"
	check "$phase" "read root:provider's APIExport (front-proxy)" k root:provider get apiexport widgets.example.io -o name
	check "$phase" "list workspaces in root (front-proxy)" k root get workspaces -o name
	check "$phase" "list ClusterRoleBindings in root:provider (front-proxy)" k root:provider get clusterrolebindings -o name
	check "$phase" "bind gadgets.example.io in root:consumer" bash -c "$(declare -f k binding); W=$W; binding gadgets | k root:consumer apply -f - -o name"
	check "$phase" "create workspace root:new-$n (on the root shard)" bash -c "$(declare -f k); W=$W; printf 'apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: new-$n}\n' | k root create -f - -o name"
	check "$phase" "create workspace root:consumer:child-$n (on shard-1)" bash -c "$(declare -f k); W=$W; printf 'apiVersion: tenancy.kcp.io/v1alpha1\nkind: Workspace\nmetadata: {name: child-$n}\nspec: {location: {selector: {matchLabels: {name: shard-1}}}}\n' | k root:consumer create -f - -o name"
}

run_checks before 0

log "stopping the root shard and cache east"
t0=$SECONDS
"$REGIONS" stop "$W" kcp-root &
stop_root=$!
"$REGIONS" stop "$W" east &
stop_east=$!
# Only these two: a bare wait would also wait for the environment itself.
wait "$stop_root" "$stop_east"
log "root and east stopped in $((SECONDS - t0)) s"
run_checks "outage" 1
# The same a minute later: what informers and indexes still hold once their watches failed.
while [ $((SECONDS - t0)) -lt 75 ]; do sleep 5; done
run_checks "outage+75s" 2

log "starting cache east and the root shard again"
t1=$SECONDS
"$REGIONS" start "$W" east
"$REGIONS" start "$W" kcp-root
until_ok 300 kubectl --kubeconfig="$W/.kcp-0/admin.kubeconfig" --context=base get --raw /readyz
log "the root shard is ready $((SECONDS - t1)) s after the start"
# Convergence: root's partition consistent at west again; both caches hold the same partitions.
until_ok 120 code_is 200 cache west "/shards/root/clusters/$PROVIDER/apis/apis.kcp.io/v1alpha2/apiexports"
log "west answers consistent reads of root's partition $((SECONDS - t1)) s after the start"
until_ok 120 ws_ready new-1 || true
run_checks after 3

same() {
	local path=$1 e w
	e=$(cache east "$path" | tail -n +2 | python3 -c 'import json,sys; print(sorted((i["metadata"]["name"], i["metadata"]["uid"]) for i in json.load(sys.stdin)["items"]))')
	w=$(cache west "$path" | tail -n +2 | python3 -c 'import json,sys; print(sorted((i["metadata"]["name"], i["metadata"]["uid"]) for i in json.load(sys.stdin)["items"]))')
	echo "$(echo "$e" | grep -o "'" | wc -l | awk '{print $1/4}') objects"
	[ "$e" = "$w" ]
}
for r in apis.kcp.io/v1alpha2/apiexports apis.kcp.io/v1alpha1/apiresourceschemas tenancy.kcp.io/v1alpha1/workspacetypes \
	core.kcp.io/v1alpha1/logicalclusters core.kcp.io/v1alpha1/shards rbac.authorization.k8s.io/v1/clusterroles \
	rbac.authorization.k8s.io/v1/clusterrolebindings; do
	for s in root shard-1; do
		check converged "east and west hold the same $s ${r##*/} (names, uids)" same "/shards/$s/clusters/*/apis/$r"
	done
done
check converged "widgets w1, w2 and those created during the outage in root:consumer" bash -c "$(declare -f k); W=$W; k root:consumer get widgets -n default -o name | paste -sd' ' -"

log "done; the table:"
python3 - "$RESULTS" <<'EOF'
import sys, collections
rows = collections.OrderedDict()
phases = []
for line in open(sys.argv[1]):
    phase, name, res, out, secs = line.rstrip("\n").split("\t")
    if phase not in phases:
        phases.append(phase)
    rows.setdefault(name, {})[phase] = f"{res} ({secs} s): {out}" if out else f"{res} ({secs} s)"
print("| check | " + " | ".join(phases) + " |")
print("|---|" + "---|" * len(phases))
for name, by in rows.items():
    print(f"| {name} | " + " | ".join(by.get(p, "") for p in phases) + " |")
EOF
