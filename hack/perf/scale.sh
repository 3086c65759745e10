#!/usr/bin/env bash
# scale.sh makes the scale table of docs/performance.md and its curves (docs/scale.png) with one
# command: it builds our cache-server and kcp's, runs the bench's scale phase for every size with
# both servers side by side (each server process fresh per size, in a memory cgroup of its own),
# and draws the curves from the bench's JSON report.
#
# It needs what CI lacks: a kcp source tree (KCP_DIR; e.g. the v0.32.3 tag, extracted from the
# repository github.com/kcp-dev/kcp) to build kcp's cache-server from, root (for the memory
# cgroups), and about an hour on 2 cores at the default sizes.
#
#   hack/perf/scale.sh /path/to/kcp
#   SIZES=10000,50000 hack/perf/scale.sh /path/to/kcp        # other sizes
#   KCP_CACHE_SERVER=/path/to/cache-server hack/perf/scale.sh  # kcp's binary, already built
#   MEMORY_LIMIT=8Gi hack/perf/scale.sh /path/to/kcp           # each server's memory limit
#   PROFILES=/tmp/prof hack/perf/scale.sh /path/to/kcp         # profiles at each size
#
# PROFILES names a directory for the profiles that explain a row (go tool pprof), of our server:
# the CPU of its restart's first 8 s (cpu-restart-N.pprof) and of 30 s of its mirror's copying
# from a third of the objects on (cpu-mirror-N.pprof), and the live heap of each server once
# loaded (ours heap-N.pb.gz, kcp's heap-kcp-N.pb.gz).
#
# OUT (default /tmp/kcp-cache-scale) receives the binaries, the table (scale.md) and the report
# (scale.json); the curves go to docs/scale.png.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/kcp-cache-scale}
sizes=${SIZES:-10000,50000,250000}
limit=${MEMORY_LIMIT:-6Gi}
mkdir -p "$out"
[[ -z "${PROFILES:-}" ]] || mkdir -p "$PROFILES"

kcp_bin=${KCP_CACHE_SERVER:-}
if [[ -z "$kcp_bin" ]]; then
	kcp_dir=${1:?usage: hack/perf/scale.sh /path/to/kcp (or KCP_CACHE_SERVER=/path/to/cache-server hack/perf/scale.sh)}
	kcp_bin=$out/kcp-cache-server-kcp
	echo "building kcp's cache-server from $kcp_dir" >&2
	(cd "$kcp_dir" && CGO_ENABLED=0 go build -o "$kcp_bin" ./cmd/cache-server)
fi

cd "$repo"
echo "building our cache-server" >&2
CGO_ENABLED=0 go build -o "$out/kcp-cache-server" ./examples/cache-server
go build -o "$out/bench" ./examples/bench

# Five repetitions of each LIST: at a quarter of a million objects one LIST of the largest type
# takes tens of seconds at each server. A phase may take half an hour there (the loads, the
# mirror's first copy).
"$out/bench" -phases scale -sizes "$sizes" -list-reps 5 -phase-timeout 30m \
	-scale-server-binary "$out/kcp-cache-server" -kcp-cache-server "$kcp_bin" \
	-scale-memory-limit "$limit" ${PROFILES:+-scale-cpuprofile "$PROFILES/cpu" -scale-heapprofile "$PROFILES/heap"} -markdown -json-file "$out/scale.json" | tee "$out/scale.md"

(cd hack/perf/perfplot && go run . -out "$repo/docs/scale.png" "$out/scale.json")
echo "table: $out/scale.md; curves: docs/scale.png" >&2
