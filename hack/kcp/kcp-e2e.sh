#!/usr/bin/env bash
# kcp-e2e.sh runs kcp's own end-to-end tests against kcp's cache-server and against ours, in
# kcp's multi-shard test environment (cmd/sharded-test-server: a cache, 2 shards, standalone
# virtual workspaces, a front-proxy), or in kcp's single-shard environment (cmd/test-server: one
# `kcp start` with its in-process cache) with our cache inside kcp, and prints a table of results
# side by side.
#
# It needs what CI lacks: a kcp source tree (KCP_DIR; e.g. the v0.32.3 tag, extracted from
# the repository github.com/kcp-dev/kcp) and about 15 minutes on 2 cores once the builds are
# warm (the first kcp build takes 10-15 minutes more). The ports kcp's environment uses are
# fixed (6443, 8010-8012, ...), so the two runs happen one after the other, never at once.
#
#   hack/kcp/kcp-e2e.sh /path/to/kcp                 # both caches, the default tests
#   CACHES=ours hack/kcp/kcp-e2e.sh /path/to/kcp     # only ours
#   TESTS='cache:TestReplicationWithWildcardListing' hack/kcp/kcp-e2e.sh /path/to/kcp
#   SKIP_KCP_BUILD=1 hack/kcp/kcp-e2e.sh /path/to/kcp  # reuse kcp's binaries of an earlier run
#   CACHES='ours regions' hack/kcp/kcp-e2e.sh /path/to/kcp  # one cache of ours, then two regions
#   CACHE_ARGS=-v=4 hack/kcp/kcp-e2e.sh /path/to/kcp   # more arguments for our cache-server
#   COUNT=3 hack/kcp/kcp-e2e.sh /path/to/kcp           # each test three times (go test -count)
#   NO_WARMUP=1 hack/kcp/kcp-e2e.sh /path/to/kcp       # the first test starts as soon as the
#                                                  # environment says ready (see env_warmup)
#
#   KCP_PATCHED_BIN=/path/kcp CACHES='single-off single-on' TESTS=... hack/kcp/kcp-e2e.sh /path/to/kcp
#                                    # kcp's single-shard environment, the kcp binary built by
#                                    # hack/kcp/kcp-run-cache-server.sh: --run-cache-server off, on
#
# TESTS lists package:test pairs; a package is a directory under kcp's test/e2e.
#
# CACHES names the environments: "kcp" (kcp's cache-server), "ours" (our cache-server in its
# place) and "regions" (two of ours: the root shard pushes to cache east, shard-1 to west, the
# caches mirror each other; see hack/kcp/kcp-regions.sh). kcp's tests that read the cache directly
# read .kcp-cache/cache.kubeconfig, which is east's in the regions environment; "relay" is the
# regions environment with a third cache of ours between east and west, which peer only with it
# (KCP_REGIONS_RELAY in hack/kcp/kcp-regions.sh: shard-1 reads root's partitions two hops away).
# "single-off" and
# "single-on" are kcp's single-shard environment, as kcp's `make test-e2e-shared-minimal` starts
# it, with the patched kcp binary KCP_PATCHED_BIN (hack/kcp/kcp-run-cache-server.sh builds it:
# hack/kcp/kcp-in-process.patch) and --run-cache-server off (kcp's own in-process cache) or on (ours).
set -euo pipefail

KCP_DIR=$(cd "${1:?usage: hack/kcp/kcp-e2e.sh KCP_DIR}" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$HERE/.kcp-e2e}
CACHES=${CACHES:-"kcp ours"}
TESTS=${TESTS:-"reconciler/cache:TestReplication cache:TestCacheServerReplicationAPI cache:TestReplicationWithWildcardListing apibinding:TestAPIBinding reconciler/apiexportendpointslice:TestAPIBindingEndpointSlicesSharded apibinding:TestAPIBindingPermissionClaimsAppliedAcrossShards"}
# kcp's Makefile (test-e2e-sharded-minimal) runs the environment with these gates.
GATES=${GATES:-WorkspaceMounts=true,CacheAPIs=true,WorkspaceAuthentication=true,LogicalClusterMigration=true}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}

mkdir -p "$OUT/bin"
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shim NAME CMD...: an executable $OUT/bin/NAME running CMD with its own arguments appended
# (KCP_ASSET_* name one executable, no arguments).
shim() {
	local f="$OUT/bin/$1"
	shift
	{ echo '#!/usr/bin/env bash'; printf 'exec'; printf ' %q' "$@"; echo ' "$@"'; } >"$f"
	chmod +x "$f"
}

# descendants PID: the ids of PID's processes, their processes, and so on.
descendants() {
	local c
	for c in $(pgrep -P "$1" || true); do
		echo "$c"
		descendants "$c"
	done
}

# env_start WHICH: start kcp's environment for WHICH in $OUT/WHICH; sets env_pid and env_work.
env_start() {
	local which=$1 cache_bin work
	# shellcheck disable=SC2206 # CACHE_ARGS is a list of words
	local cache_args=(${CACHE_ARGS:-})
	local assets=()
	unset KCP_ASSET_KCP # set by a single-shard environment run before
	case $which in
	kcp) cache_bin="$KCP_DIR/bin/cache-server" ;;
	ours)
		shim ours-cache-server "$OUT/bin/kcp-cache-server" "${cache_args[@]}"
		cache_bin="$OUT/bin/ours-cache-server"
		;;
	regions | relay)
		shim regions-cache-server "$HERE/hack/kcp/kcp-regions.sh" cache
		shim regions-kcp "$HERE/hack/kcp/kcp-regions.sh" kcp
		shim regions-vw "$HERE/hack/kcp/kcp-regions.sh" vw
		cache_bin="$OUT/bin/regions-cache-server"
		assets=(KCP_ASSET_KCP="$OUT/bin/regions-kcp" KCP_ASSET_VIRTUAL_WORKSPACES="$OUT/bin/regions-vw"
			KCP_REGIONS_CACHE_BIN="$OUT/bin/kcp-cache-server" KCP_REGIONS_KCP_BIN="$KCP_DIR/bin/kcp"
			KCP_REGIONS_VW_BIN="$KCP_DIR/bin/virtual-workspaces" KCP_REGIONS_CACHE_ARGS="${CACHE_ARGS:-}"
			KCP_REGIONS_RELAY="$([ "$which" = relay ] && echo 1 || echo 0)")
		;;
	switch)
		# kcp's cache-server, then ours, then kcp's again, on one root directory: a supervisor
		# runs the one hack/kcp/kcp-cache-switch.sh names (see its header).
		shim switch-cache-server "$HERE/hack/kcp/kcp-cache-switch.sh" supervise
		cache_bin="$OUT/bin/switch-cache-server"
		assets=(KCP_SWITCH_KCP_BIN="$KCP_DIR/bin/cache-server" KCP_SWITCH_OURS_BIN="$OUT/bin/kcp-cache-server"
			KCP_SWITCH_CACHE_ARGS="${CACHE_ARGS:-}")
		;;
	single-off | single-on)
		env_start_single "$which"
		return
		;;
	*) echo "unknown cache $which" >&2; return 1 ;;
	esac
	# CACHE_WRAPPER (hack/kcp/kcp-chaos.sh's supervisor) runs the cache of a one-cache
	# environment: sharded-test-server ends the environment when its cache process exits.
	if [ -n "${CACHE_WRAPPER:-}" ] && [ "$which" != regions ] && [ "$which" != relay ]; then
		shim "wrapped-$which-cache-server" "$CACHE_WRAPPER" "$cache_bin"
		cache_bin="$OUT/bin/wrapped-$which-cache-server"
	fi
	work="$OUT/$which"
	rm -rf "$work"; mkdir -p "$work/.kcp" "$work/logs"
	log "[$which] starting kcp's sharded test environment (cache: $cache_bin)"
	(cd "$work" && exec env UNSAFE_E2E_HACK_DISABLE_ETCD_FSYNC=true NO_GORUN=1 PATH="$KCP_DIR/bin:$PATH" \
		KCP_ASSET_CACHE_SERVER="$cache_bin" "${assets[@]}" \
		"$KCP_DIR/bin/sharded-test-server" --quiet --v=2 --log-dir-path="$work/logs" \
		--work-dir-path="$work" --shard-run-virtual-workspaces=false \
		--shard-feature-gates="$GATES" --proxy-feature-gates="$GATES" --number-of-shards=2 \
		>"$work/logs/sharded-test-server.log" 2>&1) &
	env_pid=$!
	env_work=$work
	env_wait_ready "$which"
}

# env_start_single WHICH: kcp's single-shard environment (cmd/test-server runs `kcp start`, whose
# in-process cache is kcp's or, with --run-cache-server, ours) in $OUT/WHICH.
env_start_single() {
	local which=$1 work flag=""
	[ "$which" = single-on ] && flag=--run-cache-server
	# Every kcp the environment and the tests start (kcp's private test servers too) runs
	# through this wrapper, which appends the flag to `kcp start`'s arguments.
	local kcp="$OUT/bin/kcp-$which"
	printf '#!/usr/bin/env bash\nexec %q "$@" %s\n' "$KCP_PATCHED_BIN" "$flag" >"$kcp"
	chmod +x "$kcp"
	export KCP_ASSET_KCP="$kcp"
	work="$OUT/$which"
	rm -rf "$work"; mkdir -p "$work/.kcp" "$work/logs"
	log "[$which] starting kcp's single-shard test environment (kcp: $KCP_PATCHED_BIN $flag)"
	(cd "$work" && exec env UNSAFE_E2E_HACK_DISABLE_ETCD_FSYNC=true NO_GORUN=1 PATH="$KCP_DIR/bin:$PATH" \
		"$KCP_DIR/bin/test-server" --quiet --work-dir-path="$work" --log-dir-path="$work/logs" \
		-- --feature-gates="$GATES" \
		>"$work/logs/test-server.log" 2>&1) &
	env_pid=$!
	env_work=$work
	env_wait_ready "$which"
}

# env_wait_ready WHICH: wait for the environment's ready-to-test file, then warm it up.
env_wait_ready() {
	local which=$1 work=$env_work
	local deadline=$((SECONDS + 600))
	while [ ! -f "$work/.kcp/ready-to-test" ]; do
		if ! kill -0 "$env_pid" 2>/dev/null; then
			log "[$which] the environment exited before it was ready; see $work/logs"
			env_stop
			return 1
		fi
		if [ $SECONDS -ge $deadline ]; then
			log "[$which] the environment was not ready in 10 minutes; see $work/logs"
			env_stop
			return 2
		fi
		sleep 2
	done
	log "[$which] ready"
	[ -n "${NO_WARMUP:-}" ] || env_warmup "$which"
}

# env_warmup WHICH: create a workspace through the front-proxy and wait for it to be Ready.
# sharded-test-server says ready once every process answers /readyz, but a shard's
# initializing-workspaces controllers start only after their informers on the standalone
# virtual workspaces (started last) sync, and client-go's reflector retries those with a
# growing back-off (up to 30 s): the first test would otherwise measure that back-off, with
# either cache. The time it took is logged and kept in $OUT/warmup.
env_warmup() {
	local which=$1 kc="$env_work/.kcp/admin.kubeconfig" start=$SECONDS phase=""
	kubectl --kubeconfig="$kc" --context=root create -f - >/dev/null <<EOF2 || true
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: e2e-warmup
EOF2
	while [ $((SECONDS - start)) -lt 300 ]; do
		phase=$(kubectl --kubeconfig="$kc" --context=root get workspace e2e-warmup -o jsonpath='{.status.phase}' 2>/dev/null || true)
		[ "$phase" = Ready ] && break
		sleep 1
	done
	log "[$which] warm-up: a workspace was ${phase:-not created} $((SECONDS - start)) s after the environment was ready"
	echo "$which $((SECONDS - start)) ${phase:-none}" >>"$OUT/warmup"
	kubectl --kubeconfig="$kc" --context=root delete workspace e2e-warmup --wait=false >/dev/null 2>&1 || true
}

# env_stop: stop the environment env_start started, and every process of it.
env_stop() {
	local procs
	procs=$(descendants "$env_pid")
	# The regions environment's supervisors and their processes (a stopped one has no parent).
	[ -d "$env_work/.kcp-regions" ] && procs="$procs $("$HERE/hack/kcp/kcp-regions.sh" pids "$env_work")"
	[ -d "$env_work/.kcp-switch" ] && procs="$procs $("$HERE/hack/kcp/kcp-cache-switch.sh" pids "$env_work")"
	kill -TERM "$env_pid" 2>/dev/null || true
	for _ in $(seq 60); do kill -0 "$env_pid" 2>/dev/null || break; sleep 1; done
	kill -KILL "$env_pid" $procs 2>/dev/null || true
	wait "$env_pid" 2>/dev/null || true
}

# run_env CACHE: start kcp's environment with CACHE's server, run every test, stop it.
run_env() {
	local which=$1 rc=0
	env_start "$which" || rc=$?
	if [ $rc -ne 0 ]; then
		local why=ENV-FAILED
		[ $rc -eq 2 ] && why=ENV-TIMEOUT
		for t in $TESTS; do echo "$which ${t#*:} $why" >>"$OUT/results"; done
		return 0
	fi
	run_tests "$which" "$which"
	log "[$which] stopping the environment"
	env_stop
}

# run_tests WHICH LABEL: run every test against the environment env_start started for WHICH;
# each result goes to $OUT/results under LABEL.
run_tests() {
	local which=$1 label=$2 work=$env_work
	# Sharded environments name their shards' kubeconfigs; the single-shard one has none.
	local shards=()
	case $which in
	single-*) ;;
	*) shards=(--shard-kubeconfigs="root=$work/.kcp-0/admin.kubeconfig,shard-1=$work/.kcp-1/admin.kubeconfig") ;;
	esac
	for t in $TESTS; do
		local p=${t%%:*} name=${t#*:} res
		log "[$label] $name (test/e2e/$p)"
		local started
		started=$(date +%s.%N)
		# go test runs a package's tests in its directory; kcp's tests read files relative to it.
		if (cd "$KCP_DIR/test/e2e/$p" && NO_GORUN=1 PATH="$KCP_DIR/bin:$PATH" \
			"$KCP_DIR/bin/e2e-${p//\//-}.test" -test.v -test.count="${COUNT:-1}" -test.timeout="$TEST_TIMEOUT" \
			-test.run "^${name}\$" \
			--kcp-kubeconfig="$work/.kcp/admin.kubeconfig" "${shards[@]}" \
			>"$work/logs/$name.log" 2>&1); then
			res=PASS
		else
			res=FAIL
		fi
		# Subtests give the detail: how many of them failed.
		local failed total
		failed=$(grep -c -- '^ *--- FAIL: '"$name"'/' "$work/logs/$name.log" || true)
		total=$(grep -c -- '^ *--- \(PASS\|FAIL\|SKIP\): '"$name"'/' "$work/logs/$name.log" || true)
		# The wall-clock time of the test binary (go test's own figure leaves out a parallel
		# test's subtests) and, with COUNT, go test's time of each run.
		local secs runs
		secs=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
		if [ "${COUNT:-1}" != 1 ]; then
			runs=$(sed -n 's/^--- \(PASS\|FAIL\|SKIP\): '"$name"' (\([0-9.]*\)s)$/\2/p' "$work/logs/$name.log" | paste -sd/ -)
			secs="$secs (runs: ${runs:-?})"
		fi
		log "[$label] $name: $res ($failed of $total subtests failed) in $secs s"
		echo "$label $name $res $failed/$total ${secs// /_}" >>"$OUT/results"
	done
}

log "building our cache-server"
(cd "$HERE" && CGO_ENABLED=0 go build -o "$OUT/bin/kcp-cache-server" ./examples/cache-server)

# SKIP_KCP_BUILD=1 reuses kcp's binaries from an earlier run (each link takes minutes).
if [ -z "${SKIP_KCP_BUILD:-}" ] || [ ! -x "$KCP_DIR/bin/sharded-test-server" ]; then
	log "building kcp's binaries in $KCP_DIR/bin"
	mkdir -p "$KCP_DIR/bin"
	(cd "$KCP_DIR" && CGO_ENABLED=0 go build -o bin/ ./cmd/kcp ./cmd/cache-server ./cmd/sharded-test-server \
		./cmd/kcp-front-proxy ./cmd/virtual-workspaces)
fi
case " $CACHES " in
*" single-"*)
	[ -x "${KCP_PATCHED_BIN:-}" ] || { echo "single-off/single-on need KCP_PATCHED_BIN: the kcp binary hack/kcp/kcp-run-cache-server.sh builds" >&2; exit 1; }
	if [ ! -x "$KCP_DIR/bin/test-server" ]; then
		log "building kcp's test-server in $KCP_DIR/bin"
		(cd "$KCP_DIR" && CGO_ENABLED=0 go build -o bin/ ./cmd/test-server)
	fi
	;;
esac

# now_ms, secs A B: the wall clock in milliseconds, and the seconds from A to B (two of them).
now_ms() { date +%s%3N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", (b-a)/1000}'; }

# cache_readyz [PORT ROOT]: whether the environment's cache (or the one on PORT whose serving
# certificate is in ROOT) answers /readyz with 200 to the shards' client certificate.
cache_readyz() {
	local port=${1:-8012} root=${2:-$env_work/.kcp-cache}
	[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$root/apiserver.crt" \
		--cert "$env_work/.kcp-cache/cache-client.crt" --key "$env_work/.kcp-cache/cache-client.key" \
		"https://localhost:$port/readyz")" = 200 ]
}

# kcpswitch_converged TOOL ARGS...: hack/kcp/kcpswitch's `converged` with ARGS, comparing the
# environment's two shards (read with the front-proxy's shard-admin certificate) with the cache.
kcpswitch_converged() {
	local tool=$1
	shift
	"$tool" converged "$@" --shard root=https://127.0.0.1:6444 --shard shard-1=https://127.0.0.1:6445 \
		--shard-ca "$env_work/.kcp/serving-ca.crt" --shard-cert "$env_work/.kcp-front-proxy/shard-admin.crt" \
		--shard-key "$env_work/.kcp-front-proxy/shard-admin.key"
}

# build_tests: kcp's e2e test binaries of the packages TESTS names.
build_tests() {
	local packages p bin
	packages=$(for t in $TESTS; do echo "${t%%:*}"; done | sort -u)
	for p in $packages; do
		bin="$KCP_DIR/bin/e2e-${p//\//-}.test"
		[ -n "${SKIP_KCP_BUILD:-}" ] && [ -x "$bin" ] && continue
		log "building kcp's e2e tests of test/e2e/$p"
		(cd "$KCP_DIR" && CGO_ENABLED=0 go test -c -o "$bin" "./test/e2e/$p")
	done
}

# hack/kcp/kcp-region-outage.sh and others source this file for env_start, env_stop,
# run_tests, build_tests and the binaries.
[ -n "${KCP_E2E_LIB:-}" ] && return 0

build_tests


# Results of caches not run now stay, so the two caches can be run at different times.
touch "$OUT/results"
for c in $CACHES; do
	grep -v "^$c " "$OUT/results" >"$OUT/results.tmp" || true
	mv "$OUT/results.tmp" "$OUT/results"
done
for c in $CACHES; do run_env "$c"; done

shown=$(awk '{print $1}' "$OUT/results" | sort -u | tr '\n' ' ')
printf '\n| test | %s |\n|---|%s\n' "$(echo $shown | sed 's/ / | /g')" "$(for c in $shown; do printf -- '---|'; done)"
for t in $TESTS; do
	name=${t#*:}
	row="| $name (test/e2e/${t%%:*}) |"
	for c in $shown; do
		r=$(awk -v c="$c" -v n="$name" '$1==c && $2==n {gsub("_", " ", $5); print $3 ($5 != "" ? " " $5 " s" : "") ($4 != "" && $4 !~ /^0\// ? " (" $4 " subtests failed)" : "")}' "$OUT/results")
		row="$row ${r:-not run} |"
	done
	echo "$row"
done
echo
echo "logs: $OUT/<cache>/logs"
