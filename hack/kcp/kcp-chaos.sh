#!/usr/bin/env bash
# kcp-chaos.sh runs kcp's e2e tests (hack/kcp/kcp-e2e.sh's) in kcp v0.32.3's sharded test
# environment while a nemesis kills, pauses and restarts the cache processes, and measures what
# each fault costs: when the cache answers /readyz again, and when each shard's partition at
# each cache equals the shard's own objects again, object by object.
#
#   hack/kcp/kcp-chaos.sh /path/to/kcp                   # ours, undisturbed then under the nemesis
#   CACHES=regions hack/kcp/kcp-chaos.sh /path/to/kcp    # two caches of ours (east, west)
#   CACHES=kcp INTERVAL=20 PAUSE=5 TESTS='cache:TestCacheServerReplicationAPI' ...
#                                                        # kcp's cache-server under the same nemesis
#   MODES=chaos SKIP_KCP_BUILD=1 hack/kcp/kcp-chaos.sh /path/to/kcp
#
# CACHES: kcp-e2e.sh's "ours", "regions" or "kcp"; MODES: "undisturbed" (no faults) and/or
# "chaos"; TESTS as in kcp-e2e.sh (its default list). Every INTERVAL (60 s) the nemesis applies
# the next fault of FAULTS ("kill pause term") to the next cache process (east, and west in
# regions), so that every kind meets every cache:
#   kill   SIGKILL; the supervisor starts the cache again at once, on the same data directory
#          with the same arguments;
#   pause  SIGSTOP, PAUSE (20 s) later SIGCONT;
#   term   SIGTERM, then (once it exited; SIGKILL after TERM_GRACE, 120 s) the same start.
# "ready after" and "converged after" are measured from the moment the process can run again
# (the start, or the SIGCONT): the pause itself is not counted. Convergence is checked once a
# second (each check lists every replicated type at both shards and at the cache), for at most
# CONVERGE_TIMEOUT (120 s); it races with the tests' own writes, so it is the time until a check
# first found both sides equal.
#
# It also LISTs (consistently: no resourceVersion) at every cache every 5 s and after each fault
# and reports any resourceVersion smaller than one that cache answered before, and compares every
# partition with its source before the tests and after them. It prints a table per run; the
# records are in OUT (.kcp-chaos): results (the tests), chaos/<cache>-<mode>/ (faults.tsv,
# converged.tsv, rv.tsv, partitions.tsv, the environment's logs).
#
# Internals: sharded-test-server ends the whole environment when its cache process exits, so
# every cache runs under kcp-regions.sh's supervisor (regions: already; ours and kcp: this
# script's "supervise", through kcp-e2e.sh's CACHE_WRAPPER), which starts it again once the
# nemesis removes the `stopped` mark it set before the signal.
#
# The environment uses kcp's fixed ports; the script holds /tmp/kcp-ports.lock while it runs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/../.." && pwd)

# supervise BIN ARGS...: what sharded-test-server runs as its cache: BIN ARGS under
# kcp-regions.sh's supervisor, named "east" in the work directory's .kcp-regions, as the
# regions environment names its first cache.
if [ "${1:-}" = supervise ]; then
	shift
	root=""
	for a in "$@"; do case $a in --root-directory=*) root=${a#--root-directory=} ;; esac; done
	mkdir -p "$root"
	exec "$HERE/hack/kcp/kcp-regions.sh" supervise-bg "$(cd "$(dirname "$root")" && pwd)/.kcp-regions" east "$@"
fi

if [ -z "${KCP_CHAOS_LOCKED:-}" ]; then
	KCP_CHAOS_LOCKED=1 exec flock /tmp/kcp-ports.lock "$0" "$@"
fi

export OUT=${OUT:-$HERE/.kcp-chaos}
CACHES=${CACHES:-ours}
MODES=${MODES:-undisturbed chaos}
INTERVAL=${INTERVAL:-60}
PAUSE=${PAUSE:-20}
FAULTS=${FAULTS:-kill pause term}
TERM_GRACE=${TERM_GRACE:-120}
READY_TIMEOUT=${READY_TIMEOUT:-180}
CONVERGE_TIMEOUT=${CONVERGE_TIMEOUT:-120s}
# kcp-e2e.sh's env_start, env_stop, run_tests, build_tests and the binaries it builds.
KCP_E2E_LIB=1
# shellcheck source=hack/kcp/kcp-e2e.sh
source "$HERE/hack/kcp/kcp-e2e.sh" "$@"
build_tests
TOOL="$OUT/bin/kcpswitch"
(cd "$HERE" && go build -o "$TOOL" ./hack/kcp/kcpswitch)
shim chaos-supervise "$HERE/hack/kcp/kcp-chaos.sh" supervise
export CACHE_WRAPPER="$OUT/bin/chaos-supervise"
REGIONS="$HERE/hack/kcp/kcp-regions.sh"

# port CACHE, root CACHE: where a cache (east: the one sharded-test-server started; west: the
# second region's) listens and keeps its serving certificate.
port() { if [ "$1" = west ]; then echo 8022; else echo 8012; fi; }
root() { if [ "$1" = west ]; then echo "$W/.kcp-cache-west"; else echo "$W/.kcp-cache"; fi; }

# kubeconfig CACHE: a kubeconfig for CACHE with the shards' client certificate (cache-client,
# system:masters; sharded-test-server made it). Our server overwrites <root>/cache.kubeconfig
# with its admin kubeconfig at each start, so the script writes its own.
kubeconfig() {
	local f="$RUN/$1.kubeconfig"
	[ -f "$f" ] || cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cache
  cluster: {server: "https://localhost:$(port "$1")", certificate-authority: "$(root "$1")/apiserver.crt"}
users:
- name: cache
  user: {client-certificate: "$W/.kcp-cache/cache-client.crt", client-key: "$W/.kcp-cache/cache-client.key"}
contexts:
- name: cache
  context: {cluster: cache, user: cache}
current-context: cache
EOF
	echo "$f"
}

ready() { cache_readyz "$(port "$1")" "$(root "$1")"; }

# rv_sample WHEN: one consistent LIST's resourceVersion at every cache ("-" if it did not answer).
rv_sample() {
	local c v
	for c in $TARGETS; do
		v=$("$TOOL" rv --kubeconfig "$(kubeconfig "$c")" 2>/dev/null) || v=-
		printf '%s\t%s\t%s\t%s\n' "$(now_ms)" "$1" "$c" "$v" >>"$RUN/rv.tsv"
	done
}

# converged CACHE SINCE_MS TIMEOUT [--each]: kcpswitch converged against CACHE; its output in
# $RUN/converged-CACHE.out.
converged() {
	# shellcheck disable=SC2086 # ${4:-}: --each or nothing
	kcpswitch_converged "$TOOL" --kubeconfig "$(kubeconfig "$1")" --since "$2" --timeout "$3" \
		--interval 1s ${4:-} >"$RUN/converged-$1.out" 2>&1
}

# partitions PHASE: every partition at every cache against its source, all shards at once.
partitions() {
	local c t res
	t=$(now_ms)
	for c in $TARGETS; do
		if converged "$c" "$t" 180s; then
			res="equal ($(head -1 "$RUN/converged-$c.out" | sed -n 's/^converged \([0-9.]*\) s.*/\1 s/p') after the check began)"
		else
			res="DIFFERENT after 180 s: $(tail -1 "$RUN/converged-$c.out" | cut -c1-400)"
		fi
		printf '%s\t%s\t%s\n' "$1" "$c" "$res" >>"$RUN/partitions.tsv"
		log "[$LABEL] partitions $1 at $c: $res"
		cp "$RUN/converged-$c.out" "$RUN/partitions-$1-$c.out"
	done
}

# gone PID SECONDS: wait until PID has exited, at most SECONDS.
gone() {
	local deadline=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null; do
		[ $SECONDS -ge "$deadline" ] && return 1
		sleep 0.1
	done
}

# fault N KIND TARGET: apply one fault, wait for the cache's /readyz and for every shard's
# partition at every cache; one line in faults.tsv, one per cache and shard in converged.tsv.
fault() {
	local n=$1 kind=$2 target=$3 state="$W/.kcp-regions" pid t0 t_run t_ready how=""
	pid=$(cat "$state/$target.pid")
	t0=$(now_ms)
	log "[$LABEL] fault $n: $kind $target (pid $pid)"
	case $kind in
	kill)
		touch "$state/$target.stopped"
		kill -KILL "$pid"
		gone "$pid" 30 || how="still running 30 s after SIGKILL"
		t_run=$(now_ms)
		rm -f "$state/$target.stopped"
		;;
	pause)
		kill -STOP "$pid"
		sleep "$PAUSE"
		t_run=$(now_ms)
		kill -CONT "$pid"
		;;
	term)
		touch "$state/$target.stopped"
		kill -TERM "$pid"
		if ! gone "$pid" "$TERM_GRACE"; then
			how="SIGKILL after ${TERM_GRACE} s"
			kill -KILL "$pid" 2>/dev/null || true
			gone "$pid" 30 || true
		fi
		how="${how:-exited $(secs "$t0" "$(now_ms)") s after SIGTERM}"
		t_run=$(now_ms)
		rm -f "$state/$target.stopped"
		;;
	esac
	local deadline=$((SECONDS + READY_TIMEOUT)) ready_s=NOT
	until ready "$target"; do
		[ $SECONDS -ge $deadline ] && break
		sleep 0.2
	done
	if ready "$target"; then
		t_ready=$(now_ms)
		ready_s=$(secs "$t_run" "$t_ready")
	fi
	rv_sample "after fault $n"
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$kind" "$target" "$ready_s" "$(secs "$t0" "$t_run")" "${how:--}" >>"$RUN/faults.tsv"
	log "[$LABEL] fault $n: $target ready ${ready_s} s after it could run again ${how:+($how)}"
	local c pids=()
	for c in $TARGETS; do
		converged "$c" "$t_run" "$CONVERGE_TIMEOUT" --each &
		pids+=($!)
	done
	wait "${pids[@]}" || true
	for c in $TARGETS; do
		cp "$RUN/converged-$c.out" "$RUN/fault-$n-$c.out"
		local s
		for s in root shard-1; do
			local v
			v=$(sed -n "s/^converged $s \([0-9.]*\) s.*/\1/p" "$RUN/converged-$c.out")
			printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$kind" "$target" "$c" "$s" "${v:-NOT}" >>"$RUN/converged.tsv"
			log "[$LABEL] fault $n ($kind $target): $s's partition at $c converged after ${v:-NOT (see $RUN/fault-$n-$c.out)} s"
		done
	done
}

# nemesis: a fault every INTERVAL seconds until $RUN/stop exists; never stops inside a fault,
# so no cache is left stopped or paused.
nemesis() {
	local n=0 next kinds targets
	read -r -a kinds <<<"$FAULTS"
	read -r -a targets <<<"$TARGETS"
	next=$((SECONDS + INTERVAL))
	while true; do
		while [ $SECONDS -lt $next ] && [ ! -e "$RUN/stop" ]; do sleep 1; done
		[ -e "$RUN/stop" ] && return 0
		next=$((SECONDS + INTERVAL))
		fault "$n" "${kinds[$((n % ${#kinds[@]}))]}" "${targets[$((n % ${#targets[@]}))]}" ||
			log "[$LABEL] fault $n failed"
		n=$((n + 1))
	done
}

# sampler: rv_sample every 5 s until $RUN/stop exists.
sampler() {
	while [ ! -e "$RUN/stop" ]; do
		rv_sample periodic
		sleep 5
	done
}

# run_one CACHE MODE: the environment, the partitions, the tests (with the nemesis), the
# partitions again.
run_one() {
	local which=$1 mode=$2
	LABEL=$which-$mode
	RUN="$OUT/chaos/$LABEL"
	rm -rf "$RUN"
	mkdir -p "$RUN"
	: >"$RUN/faults.tsv"
	: >"$RUN/converged.tsv"
	: >"$RUN/rv.tsv"
	: >"$RUN/partitions.tsv"
	TARGETS=east
	[ "$which" = regions ] && TARGETS="east west"
	if ! env_start "$which"; then
		for t in $TESTS; do echo "$LABEL ${t#*:} ENV-FAILED" >>"$OUT/results"; done
		return 0
	fi
	W=$env_work
	partitions before
	local bg=()
	sampler &
	bg+=($!)
	if [ "$mode" = chaos ]; then
		nemesis &
		bg+=($!)
	fi
	run_tests "$which" "$LABEL"
	touch "$RUN/stop"
	log "[$LABEL] tests done; waiting for the nemesis to finish its fault"
	wait "${bg[@]}" || true
	local c
	for c in $TARGETS; do
		until_ready=$((SECONDS + READY_TIMEOUT))
		until ready "$c" || [ $SECONDS -ge $until_ready ]; do sleep 1; done
	done
	rv_sample after
	partitions after
	log "[$LABEL] stopping the environment"
	env_stop
	# The logs, not the data (etcd's directories), stay for reading.
	mv "$W/logs" "$RUN/logs"
	cp -r "$W/.kcp-regions" "$RUN/supervisors" 2>/dev/null || true
	[ -f "$W/.kcp-cache-west/cache.log" ] && cp "$W/.kcp-cache-west/cache.log" "$RUN/logs/west.log"
	rm -rf "$W"
}

touch "$OUT/results"
for c in $CACHES; do
	for m in $MODES; do
		grep -v "^$c-$m " "$OUT/results" >"$OUT/results.tmp" || true
		mv "$OUT/results.tmp" "$OUT/results"
		run_one "$c" "$m"
	done
done

# The table: one row per run ever recorded in OUT.
python3 - "$OUT" $TESTS <<'EOF'
import collections, os, statistics, sys
out, tests = sys.argv[1], [t.split(":", 1)[1] for t in sys.argv[2:]]
def rows(path):
    try:
        return [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []
results = collections.defaultdict(dict)
for line in open(os.path.join(out, "results")):
    f = line.split()
    results[f[0]][f[1]] = f
def stats(v):
    if not v:
        return "-"
    return "%.1f / %.1f / %.1f" % (min(v), statistics.median(v), max(v))
print("| run | tests passed | faults (kill/pause/term) | ready after, s | converged after kill, s (min / median / max) | after pause | after term | not converged | consistent LIST rv went back | partitions before / after |")
print("|---|---|---|---|---|---|---|---|---|---|")
for label in sorted(os.listdir(os.path.join(out, "chaos"))):
    d = os.path.join(out, "chaos", label)
    res = results.get(label, {})
    passed = sum(1 for t in tests if t in res and res[t][2] == "PASS")
    faults = rows(os.path.join(d, "faults.tsv"))
    kinds = collections.Counter(f[1] for f in faults)
    ready = [float(f[3]) for f in faults if f[3] != "NOT"]
    notready = sum(1 for f in faults if f[3] == "NOT")
    conv = collections.defaultdict(list)
    notconv = 0
    for f in rows(os.path.join(d, "converged.tsv")):
        if f[5] == "NOT":
            notconv += 1
        else:
            conv[f[1]].append(float(f[5]))
    back, seen = [], {}
    for f in rows(os.path.join(d, "rv.tsv")):
        if f[3] == "-":
            continue
        v = int(f[3])
        if v < seen.get(f[2], 0):
            back.append("%s %s<%s (%s)" % (f[2], v, seen[f[2]], f[1]))
        seen[f[2]] = max(v, seen.get(f[2], 0))
    parts = collections.defaultdict(list)
    for f in rows(os.path.join(d, "partitions.tsv")):
        parts[f[0]].append(f[2].split(" ")[0])
    part = "%s / %s" % (",".join(parts["before"]) or "-", ",".join(parts["after"]) or "-")
    r = "-" if not ready else "%.1f–%.1f" % (min(ready), max(ready))
    if notready:
        r += " (%d not ready)" % notready
    print("| %s | %d/%d | %d (%d/%d/%d) | %s | %s | %s | %s | %d of %d | %s | %s |" % (
        label, passed, len(tests), len(faults), kinds["kill"], kinds["pause"], kinds["term"], r,
        stats(conv["kill"]), stats(conv["pause"]), stats(conv["term"]), notconv,
        len(rows(os.path.join(d, "converged.tsv"))), "; ".join(back[:5]) or "never", part))
print()
labels = sorted(results)
print("| test | " + " | ".join(labels) + " |")
print("|---|" + "---|" * len(labels))
for t in tests:
    cells = []
    for l in labels:
        f = results[l].get(t)
        if not f:
            cells.append("not run")
            continue
        cell = f[2] + (" %s s" % f[4].replace("_", " ") if len(f) > 4 else "")
        if len(f) > 3 and not f[3].startswith("0/"):
            cell += " (%s subtests failed)" % f[3]
        cells.append(cell)
    print("| %s | %s |" % (t, " | ".join(cells)))
EOF
echo
echo "records: $OUT/chaos/<cache>-<mode>/, the tests' logs in its logs/"
