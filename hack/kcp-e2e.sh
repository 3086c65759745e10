#!/usr/bin/env bash
# kcp-e2e.sh runs kcp's own end-to-end tests against kcp's cache-server and against ours, in
# kcp's multi-shard test environment (cmd/sharded-test-server: a cache, 2 shards, standalone
# virtual workspaces, a front-proxy), and prints a table of results side by side.
#
# It needs what CI lacks: a kcp source tree (KCP_DIR; e.g. the v0.32.3 tag, extracted from
# the repository github.com/kcp-dev/kcp) and about 15 minutes on 2 cores once the builds are
# warm (the first kcp build takes 10-15 minutes more). The ports kcp's environment uses are
# fixed (6443, 8010-8012, ...), so the two runs happen one after the other, never at once.
#
#   hack/kcp-e2e.sh /path/to/kcp                 # both caches, the default tests
#   CACHES=ours hack/kcp-e2e.sh /path/to/kcp     # only ours
#   TESTS='cache:TestReplicationWithWildcardListing' hack/kcp-e2e.sh /path/to/kcp
#   SKIP_KCP_BUILD=1 hack/kcp-e2e.sh /path/to/kcp  # reuse kcp's binaries of an earlier run
#
# TESTS lists package:test pairs; a package is a directory under kcp's test/e2e.
set -euo pipefail

KCP_DIR=$(cd "${1:?usage: hack/kcp-e2e.sh KCP_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$HERE/.kcp-e2e}
CACHES=${CACHES:-"kcp ours"}
TESTS=${TESTS:-"reconciler/cache:TestReplication cache:TestCacheServerReplicationAPI cache:TestReplicationWithWildcardListing apibinding:TestAPIBinding reconciler/apiexportendpointslice:TestAPIBindingEndpointSlicesSharded apibinding:TestAPIBindingPermissionClaimsAppliedAcrossShards"}
# kcp's Makefile (test-e2e-sharded-minimal) runs the environment with these gates.
GATES=${GATES:-WorkspaceMounts=true,CacheAPIs=true,WorkspaceAuthentication=true,LogicalClusterMigration=true}
TEST_TIMEOUT=${TEST_TIMEOUT:-20m}

mkdir -p "$OUT/bin"
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "building our cache-server"
(cd "$HERE" && CGO_ENABLED=0 go build -o "$OUT/bin/kcp-cache-server" ./examples/cache-server)

# SKIP_KCP_BUILD=1 reuses kcp's binaries from an earlier run (each link takes minutes).
if [ -z "${SKIP_KCP_BUILD:-}" ] || [ ! -x "$KCP_DIR/bin/sharded-test-server" ]; then
	log "building kcp's binaries in $KCP_DIR/bin"
	mkdir -p "$KCP_DIR/bin"
	(cd "$KCP_DIR" && CGO_ENABLED=0 go build -o bin/ ./cmd/kcp ./cmd/cache-server ./cmd/sharded-test-server \
		./cmd/kcp-front-proxy ./cmd/virtual-workspaces)
fi

packages=$(for t in $TESTS; do echo "${t%%:*}"; done | sort -u)
for p in $packages; do
	bin="$KCP_DIR/bin/e2e-${p//\//-}.test"
	[ -n "${SKIP_KCP_BUILD:-}" ] && [ -x "$bin" ] && continue
	log "building kcp's e2e tests of test/e2e/$p"
	(cd "$KCP_DIR" && CGO_ENABLED=0 go test -c -o "$bin" "./test/e2e/$p")
done

# run_env CACHE: start kcp's environment with CACHE's server, run every test, stop it.
run_env() {
	local which=$1 cache_bin work pid
	case $which in
	kcp) cache_bin="$KCP_DIR/bin/cache-server" ;;
	ours) cache_bin="$OUT/bin/kcp-cache-server" ;;
	*) echo "unknown cache $which" >&2; return 1 ;;
	esac
	work="$OUT/$which"
	rm -rf "$work"; mkdir -p "$work/.kcp" "$work/logs"
	log "[$which] starting kcp's sharded test environment (cache: $cache_bin)"
	(cd "$work" && UNSAFE_E2E_HACK_DISABLE_ETCD_FSYNC=true NO_GORUN=1 PATH="$KCP_DIR/bin:$PATH" \
		KCP_ASSET_CACHE_SERVER="$cache_bin" \
		exec "$KCP_DIR/bin/sharded-test-server" --quiet --v=2 --log-dir-path="$work/logs" \
		--work-dir-path="$work" --shard-run-virtual-workspaces=false \
		--shard-feature-gates="$GATES" --proxy-feature-gates="$GATES" --number-of-shards=2 \
		>"$work/logs/sharded-test-server.log" 2>&1) &
	pid=$!
	local deadline=$((SECONDS + 600))
	while [ ! -f "$work/.kcp/ready-to-test" ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "[$which] the environment exited before it was ready; see $work/logs"
			for t in $TESTS; do echo "$which ${t#*:} ENV-FAILED" >>"$OUT/results"; done
			return 0
		fi
		if [ $SECONDS -ge $deadline ]; then
			log "[$which] the environment was not ready in 10 minutes; see $work/logs"
			kill -TERM "$pid"; wait "$pid" || true
			for t in $TESTS; do echo "$which ${t#*:} ENV-TIMEOUT" >>"$OUT/results"; done
			return 0
		fi
		sleep 2
	done
	log "[$which] ready"
	for t in $TESTS; do
		local p=${t%%:*} name=${t#*:} res
		log "[$which] $name (test/e2e/$p)"
		# go test runs a package's tests in its directory; kcp's tests read files relative to it.
		if (cd "$KCP_DIR/test/e2e/$p" && NO_GORUN=1 PATH="$KCP_DIR/bin:$PATH" \
			"$KCP_DIR/bin/e2e-${p//\//-}.test" -test.v -test.count=1 -test.timeout="$TEST_TIMEOUT" \
			-test.run "^${name}\$" \
			--kcp-kubeconfig="$work/.kcp/admin.kubeconfig" \
			--shard-kubeconfigs="root=$work/.kcp-0/admin.kubeconfig,shard-1=$work/.kcp-1/admin.kubeconfig" \
			>"$work/logs/$name.log" 2>&1); then
			res=PASS
		else
			res=FAIL
		fi
		# Subtests give the detail: how many of them failed.
		local failed total
		failed=$(grep -c -- '^ *--- FAIL: '"$name"'/' "$work/logs/$name.log" || true)
		total=$(grep -c -- '^ *--- \(PASS\|FAIL\|SKIP\): '"$name"'/' "$work/logs/$name.log" || true)
		log "[$which] $name: $res ($failed of $total subtests failed)"
		echo "$which $name $res $failed/$total" >>"$OUT/results"
	done
	log "[$which] stopping the environment"
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
	kill -KILL "$pid" 2>/dev/null || true
	# sharded-test-server's children: anything still holding the environment's ports.
	pkill -KILL -f "$work" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

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
		r=$(awk -v c="$c" -v n="$name" '$1==c && $2==n {print $3 ($4 != "" ? " (" $4 " subtests failed)" : "")}' "$OUT/results")
		row="$row ${r:-not run} |"
	done
	echo "$row"
done
echo
echo "logs: $OUT/<cache>/logs"
