#!/usr/bin/env bash
# kcp-cache-switch.sh moves a running kcp from kcp's cache-server to ours and back, on the same
# data, and measures the move: the runbook of docs/operations.md ("Moving from kcp's
# cache-server, and back"), run against kcp v0.32.3's sharded test environment
# (cmd/sharded-test-server: a cache, the root shard, shard-1, virtual workspaces, a front-proxy).
#
#   hack/kcp/kcp-cache-switch.sh /path/to/kcp          # kcp's binaries in KCP_DIR/bin (kcp-e2e.sh)
#   SKIP_KCP_BUILD=1 hack/kcp/kcp-cache-switch.sh /path/to/kcp
#   NO_EXPORT=1 ...      # move back without cache-server export-kcp-layout (what kcp then does)
#   OURS_BIN=FILE ...    # our cache-server from FILE instead of building this tree (an older one)
#   SWITCHES="ours kcp"  # the caches switched to in turn, from kcp's (the default: there and back)
#   EXPORTS=10 MORE=5    # APIExports (with a schema each) per shard at the start, and created
#                        # on each shard while each cache serves after a switch
#
# What it does, with kcp's own client (kubectl through the front-proxy, as kcp-admin):
#   1. starts the environment with kcp's cache-server, creates workspaces root:switch-root (root
#      shard) and root:switch-one (shard-1) with EXPORTS APIExports each, waits until kcp's cache
#      holds every shard's objects;
#   2. starts a reader that LISTs every APIExport of every partition of the cache every 150 ms;
#   3. stops kcp's cache-server (SIGTERM) and starts ours with the same arguments on the same
#      root directory and ports: ours moves kcp's layout into its own at start;
#   4. while ours serves: creates MORE APIExports on each shard, deletes one and relabels one;
#   5. stops ours (SIGTERM), runs `cache-server export-kcp-layout` with the same arguments
#      (unless NO_EXPORT), starts kcp's cache-server again, creates MORE APIExports on each shard;
#   6. checks what stayed behind: the keys of the cache's etcd by layout, the copies the cache
#      holds that no shard does, and the files of ours in the root directory.
# Each "converged" time runs from the SIGTERM that began the switch (or from the creation of
# the objects) until every shard's partition in the cache holds exactly the shard's objects of
# every type kcp replicates, object by object (hack/kcp/kcpswitch converged). It prints a
# table of the times and of what the reader saw in each phase.
#
# Internals: sharded-test-server ends the whole environment when its cache process exits, so
# its cache is a supervisor (this script's "supervise", through KCP_ASSET_CACHE_SERVER; see
# kcp-e2e.sh's "switch" environment) that runs kcp's cache-server or ours, whichever
# .kcp-switch/use names, and starts it again when the driver stopped it on purpose.
#
# The environment uses kcp's fixed ports; the script holds /tmp/kcp-ports.lock while it runs.
set -euo pipefail

# arg NAME ARGS...: the value of --NAME=VALUE in ARGS.
arg() {
	local name=$1 a
	shift
	for a in "$@"; do
		case $a in --"$name"=*) echo "${a#--"$name"=}"; return 0 ;; esac
	done
	return 1
}

# supervise ARGS...: run the cache .kcp-switch/use names (kcp's by default) with ARGS, again
# after the driver stopped it on purpose (.kcp-switch/stopped), and exit with its status when it
# ends otherwise.
supervise() {
	local root state child="" n=0
	root=$(arg root-directory "$@")
	state="$(cd "$(dirname "$root")" && pwd)/.kcp-switch"
	mkdir -p "$state"
	echo $$ >"$state/supervisor"
	# The cache's arguments as sharded-test-server gave them, for export-kcp-layout.
	printf '%s\n' "$@" >"$state/args"
	trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 143' TERM INT
	# sharded-test-server ends its children with SIGKILL: a watchdog stops the cache then.
	(
		sup=$$
		while kill -0 "$sup" 2>/dev/null; do sleep 1; done
		p=$(cat "$state/pid" 2>/dev/null || true)
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
		sleep 10
		[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	) </dev/null >/dev/null 2>&1 &
	echo $! >"$state/watchdog"
	while true; do
		local which bin extra=()
		which=$(cat "$state/use" 2>/dev/null || echo kcp)
		case $which in
		kcp) bin=${KCP_SWITCH_KCP_BIN:?} ;;
		ours)
			bin=${KCP_SWITCH_OURS_BIN:?}
			# shellcheck disable=SC2206 # a list of words
			extra=(${KCP_SWITCH_CACHE_ARGS:-})
			;;
		esac
		n=$((n + 1))
		echo "kcp-cache-switch: starting $which's cache-server (run $n, log $state/cache-$n-$which.log)"
		"$bin" "$@" "${extra[@]}" >"$state/cache-$n-$which.log" 2>&1 &
		child=$!
		echo "$child" >"$state/pid"
		local rc=0
		wait "$child" || rc=$?
		if [ -e "$state/stopped" ]; then
			echo "kcp-cache-switch: $which's cache-server stopped on purpose (exit $rc)"
			while [ -e "$state/stopped" ]; do sleep 0.1; done
			continue
		fi
		exit "$rc"
	done
}

case ${1:-} in
supervise)
	shift
	supervise "$@"
	;;
pids)
	for f in "$2"/.kcp-switch/supervisor "$2"/.kcp-switch/watchdog "$2"/.kcp-switch/pid; do
		[ -f "$f" ] && cat "$f"
	done
	exit 0
	;;
esac

if [ -z "${KCP_SWITCH_LOCKED:-}" ]; then
	KCP_SWITCH_LOCKED=1 exec flock /tmp/kcp-ports.lock "$0" "$@"
fi

HERE=$(cd "$(dirname "$0")/../.." && pwd)
export OUT=${OUT:-$HERE/.kcp-cache-switch}
EXPORTS=${EXPORTS:-10}
SWITCHES=${SWITCHES:-ours kcp}
MORE=${MORE:-5}
# kcp-e2e.sh's env_start and env_stop, and the binaries it builds (ours: $OUT/bin/kcp-cache-server).
KCP_E2E_LIB=1
# shellcheck source=hack/kcp/kcp-e2e.sh
source "$HERE/hack/kcp/kcp-e2e.sh" "$@"
[ -n "${OURS_BIN:-}" ] && cp "$OURS_BIN" "$OUT/bin/kcp-cache-server"
OURS="$OUT/bin/kcp-cache-server"
TOOL="$OUT/bin/kcpswitch"
(cd "$HERE" && go build -o "$TOOL" ./hack/kcp/kcpswitch)

# name WHICH: how the table names a cache.
name() { if [ "$1" = kcp ]; then echo "kcp's cache-server"; else echo "our cache-server"; fi; }

env_start switch
W=$env_work
STATE=$W/.kcp-switch
RESULTS=$OUT/results.md
PHASES=$OUT/phases
GONE=$OUT/gone
: >"$RESULTS"
: >"$PHASES"
: >"$GONE"
reader_pid=""
cleanup() {
	[ -n "$reader_pid" ] && kill -TERM "$reader_pid" 2>/dev/null && wait "$reader_pid" 2>/dev/null
	env_stop
}
trap cleanup EXIT

# The shards' cache kubeconfig (cache-client, system:masters), as sharded-test-server wrote it:
# ours writes its admin kubeconfig under the same name in its root directory.
KC=$OUT/cache.kubeconfig
cp "$W/.kcp-cache/cache.kubeconfig" "$KC"
ls -A "$W/.kcp-cache" | sort >"$OUT/root-files.before"

# result NAME VALUE: a row of the table.
result() {
	log "$1: $2"
	printf '| %s | %s |\n' "$1" "$2" >>"$RESULTS"
}

# k PATH ARGS...: kubectl in the workspace PATH through the front-proxy, as kcp-admin.
k() {
	local path=$1
	shift
	kubectl --kubeconfig="$W/.kcp/admin.kubeconfig" --context=root --request-timeout=30s \
		--server="https://127.0.0.1:6443/clusters/$path" "$@"
}

# until_ok SECONDS CMD...: run CMD until it succeeds, at most SECONDS.
until_ok() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 1
	done
}

# converged SINCE_MS: wait until every shard's partition equals the shard; prints the time
# since SINCE_MS, or fails after 5 minutes.
converged() {
	kcpswitch_converged "$TOOL" --kubeconfig "$KC" --since "$1" --timeout "${CONVERGE_TIMEOUT:-5m}" \
		>"$OUT/converged.out" 2>&1
	local rc=$?
	cat "$OUT/converged.out" >&2
	head -1 "$OUT/converged.out" | sed -n 's/^converged \([0-9.]*\) s.*/\1 s/p'
	return $rc
}

# exports WORKSPACE FROM TO: APIExports FROM..TO, each with a schema, in WORKSPACE.
exports() {
	local i
	for i in $(seq "$2" "$3"); do
		cat <<EOF
apiVersion: apis.kcp.io/v1alpha1
kind: APIResourceSchema
metadata:
  name: v1.things$i.switch.example.io
spec:
  group: switch.example.io
  names: {kind: Thing$i, listKind: Thing${i}List, plural: things$i, singular: thing$i}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apis.kcp.io/v1alpha2
kind: APIExport
metadata:
  name: export-$i
spec:
  resources:
  - {name: things$i, group: switch.example.io, schema: v1.things$i.switch.example.io, storage: {crd: {}}}
---
EOF
	done | k "$1" apply -f - >/dev/null
}

# phase NAME: the reader's LISTs from now on belong to NAME.
phase() { echo "$(now_ms) $1" >>"$PHASES"; }

# switch_to WHICH: stop the running cache with SIGTERM, then start WHICH's on the same
# arguments; records the times.
switch_to() {
	local which=$1 from pid t0 t_stopped t_ready rc how=SIGTERM
	from=$(cat "$STATE/use" 2>/dev/null || echo kcp)
	pid=$(cat "$STATE/pid")
	touch "$STATE/stopped"
	t0=$(now_ms)
	phase "$from→$which"
	kill -TERM "$pid"
	# kcp's cache-server takes 60 s to stop while shards watch it (its HTTP server waits for
	# them until its shutdown timeout); 120 s before SIGKILL.
	local deadline=$((SECONDS + 120))
	while kill -0 "$pid" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			# Go prints every goroutine on SIGQUIT: the log says what held the process.
			how="SIGKILL (SIGTERM ignored for 120 s; goroutines in $(ls -t "$STATE"/cache-*-"$from".log | head -1))"
			kill -QUIT "$pid" 2>/dev/null || true
			sleep 5
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	t_stopped=$(now_ms)
	result "$from→$which: $(name "$from") stopped" "$(secs "$t0" "$t_stopped") s after SIGTERM, by $how"
	if [ "$which" = kcp ] && [ -z "${NO_EXPORT:-}" ]; then
		local args
		args=$(tr '\n' ' ' <"$STATE/args")
		local t_e
		t_e=$(now_ms)
		# shellcheck disable=SC2086 # the cache's arguments, as the supervisor got them
		if "$OURS" export-kcp-layout $args ${CACHE_ARGS:-} >"$OUT/export.log" 2>&1; then
			result "$from→$which: cache-server export-kcp-layout" "$(secs "$t_e" "$(now_ms)") s: $(grep -o 'Exported.*' "$OUT/export.log" | tail -1)"
		else
			result "$from→$which: cache-server export-kcp-layout" "FAILED (see $OUT/export.log)"
		fi
	fi
	echo "$which" >"$STATE/use"
	rm -f "$STATE/stopped"
	if until_ok "${READY_TIMEOUT:-300}" cache_readyz; then
		t_ready=$(now_ms)
		result "$from→$which: $(name "$which") ready (/readyz 200)" "$(secs "$t0" "$t_ready") s after SIGTERM ($(secs "$t_stopped" "$t_ready") s after $(name "$from") exited)"
	else
		result "$from→$which: $(name "$which") ready (/readyz 200)" "NOT READY in ${READY_TIMEOUT:-300} s"
	fi
	phase "$which"
	local conv
	if conv=$(converged "$t0"); then
		local after_exit
		after_exit=$(awk -v c="${conv% s}" -v a="$t0" -v b="$t_stopped" 'BEGIN{printf "%.1f", c-(b-a)/1000}')
		result "$from→$which: every shard's partition converged" "$conv after SIGTERM ($after_exit s after $(name "$from") exited)"
	else
		result "$from→$which: every shard's partition converged" "NOT CONVERGED in ${CONVERGE_TIMEOUT:-5m} (see $OUT/converged.out)"
	fi
	if [ "$which" = ours ]; then
		local mig
		mig=$(grep -h "kcp's cache-server's layout" "$(ls -t "$STATE"/cache-*-ours.log | head -1)" | tail -1 |
			grep -o ' moved=[0-9]*\| annotated=[0-9]*\| superseded=[0-9]*\| skipped=[0-9]*\| duration="[^"]*"' | paste -sd' ' - || true)
		result "$from→$which: our cache-server's move of kcp's layout at start" "${mig:-not logged}"
	fi
	return 0
}

# more WORKSPACE... : MORE new APIExports in each, then how long until the cache holds them.
more() {
	local t first=$((EXPORTS + N_MORE + 1)) last=$((EXPORTS + N_MORE + MORE)) ws
	t=$(now_ms)
	for ws in "$@"; do exports "$ws" "$first" "$last"; done
	N_MORE=$((N_MORE + MORE))
	local conv
	if conv=$(converged "$t"); then
		result "$(cat "$STATE/use"): $MORE new APIExports on each shard reached the cache" "$conv after their creation"
	else
		result "$(cat "$STATE/use"): $MORE new APIExports on each shard reached the cache" "NOT CONVERGED in ${CONVERGE_TIMEOUT:-5m}"
	fi
}
N_MORE=0

log "creating root:switch-root (root shard) and root:switch-one (shard-1) with $EXPORTS APIExports each"
k root apply -f - >/dev/null <<EOF
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata: {name: switch-root}
spec: {location: {selector: {matchLabels: {name: root}}}}
---
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata: {name: switch-one}
spec: {location: {selector: {matchLabels: {name: shard-1}}}}
EOF
ws_ready() { [ "$(k root get workspace "$1" -o jsonpath='{.status.phase}')" = Ready ]; }
until_ok 300 ws_ready switch-root
until_ok 300 ws_ready switch-one
ONE=$(k root get workspace switch-one -o jsonpath='{.spec.cluster}')
exports root:switch-root 1 "$EXPORTS"
exports root:switch-one 1 "$EXPORTS"
t=$(now_ms)
if conv=$(converged "$t"); then
	result "kcp: the setup's objects reached kcp's cache" "$conv after their creation"
else
	result "kcp: the setup's objects reached kcp's cache" "NOT CONVERGED"
fi
# The CRDs kcp's cache-server declared, to tell which others stay at the end.
S=$W/.kcp-cache/etcd-server/secrets
"$TOOL" keys --endpoint https://localhost:8010 --cacert "$S/ca/cert.pem" --cert "$S/client/cert.pem" \
	--key "$S/client/key.pem" | sed -n 's/^  crd-name \([^ ]*\) .*/\1/p' | sort >"$OUT/crds.before"

"$TOOL" reader --kubeconfig "$KC" --out "$OUT/reader.jsonl" --gone "$GONE" &
reader_pid=$!
phase kcp
sleep 3

changed=""
for which in $SWITCHES; do
	switch_to "$which"
	more root:switch-root root:switch-one
	if [ "$which" = ours ] && [ -z "$changed" ]; then
		# A deletion and an update while ours serves.
		echo "shard-1/$ONE/export-1" >>"$GONE"
		k root:switch-one delete apiexport export-1 >/dev/null
		k root:switch-root label apiexport export-2 switched=yes >/dev/null
		t=$(now_ms)
		if conv=$(converged "$t"); then
			result "ours: a deletion and a label change on the shards reached the cache" "$conv"
		else
			result "ours: a deletion and a label change on the shards reached the cache" "NOT CONVERGED"
		fi
		changed=1
	fi
	sleep 3
done
kill -TERM "$reader_pid"
wait "$reader_pid" 2>/dev/null || true
reader_pid=""

log "what stayed behind"
if [ "$(cat "$STATE/use")" = kcp ]; then
	S=$W/.kcp-cache/etcd-server/secrets
	"$TOOL" keys --endpoint https://localhost:8010 --cacert "$S/ca/cert.pem" --cert "$S/client/cert.pem" \
		--key "$S/client/key.pem" >"$OUT/keys.out"
else
	S=$W/.kcp-cache/etcd-certs
	"$TOOL" keys --endpoint https://127.0.0.1:8010 --cacert "$S/ca.crt" --cert "$S/client.crt" \
		--key "$S/client.key" >"$OUT/keys.out"
fi
cat "$OUT/keys.out" >&2
result "after: keys of the cache's etcd by layout" "$(grep -v '^ ' "$OUT/keys.out" | paste -sd, - | sed 's/,/, /g')"
sed -n 's/^  crd-name \([^ ]*\) .*/\1/p' "$OUT/keys.out" | sort >"$OUT/crds.after"
extra=$(comm -13 "$OUT/crds.before" "$OUT/crds.after" | paste -sd' ' -)
result "after: CRDs kcp's cache-server did not declare" "${extra:-none}"
if conv=$(converged "$(now_ms)"); then
	result "after: copies in kcp's cache that no shard holds, or that differ" "none"
else
	result "after: copies in kcp's cache that no shard holds, or that differ" "$(tail -1 "$OUT/converged.out")"
fi
ls -A "$W/.kcp-cache" | sort >"$OUT/root-files.after"
extra=$(comm -13 "$OUT/root-files.before" "$OUT/root-files.after" | paste -sd' ' -)
result "after: files in the root directory that kcp's cache-server did not write" "${extra:-none}"
# Our cache-server writes its admin kubeconfig as <root>/cache.kubeconfig, where
# sharded-test-server keeps the shards' (read by the shards at their start only); the export
# removes ours. The script puts the shards' back.
if cmp -s "$KC" "$W/.kcp-cache/cache.kubeconfig"; then
	result "after: <root>/cache.kubeconfig (sharded-test-server's, for the shards)" "unchanged"
elif [ -e "$W/.kcp-cache/cache.kubeconfig" ]; then
	result "after: <root>/cache.kubeconfig (sharded-test-server's, for the shards)" "our admin kubeconfig in its place; the shards' put back"
	cp "$KC" "$W/.kcp-cache/cache.kubeconfig"
else
	result "after: <root>/cache.kubeconfig (sharded-test-server's, for the shards)" "gone (ours overwrote it, the export removed ours); the shards' put back"
	cp "$KC" "$W/.kcp-cache/cache.kubeconfig"
fi
for s in 0 1; do
	code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$W/.kcp/serving-ca.crt" --cert "$W/.kcp-front-proxy/shard-admin.crt" \
		--key "$W/.kcp-front-proxy/shard-admin.key" "https://127.0.0.1:$((6444 + s))/readyz")
	result "after: shard .kcp-$s /readyz" "$code"
done

{
	echo
	echo "| step | measured |"
	echo "|---|---|"
	cat "$RESULTS"
	echo
	echo "What a reader LISTing every APIExport of every partition every 150 ms saw, by phase:"
	echo
	"$TOOL" summarize --reader "$OUT/reader.jsonl" --phases "$PHASES"
	echo
	echo "Per type at the end (shard / cache):"
	echo
	tail -n +2 "$OUT/converged.out"
} | tee "$OUT/report.md"
echo "logs: $W/logs, the caches' logs: $STATE/cache-*.log"
