#!/usr/bin/env bash
# test.sh builds and vets every package of kcp-cache with the build tag kcp inside kcp v0.32.3's
# module graph (this module: kcp's requirements and its replace directives, k8s.io/* from kcp's
# Kubernetes fork) and runs the tests of cache/... there. It needs no kcp checkout: kcp's three
# staged modules come from the file-based module proxy kcp-goproxy, which lives in shared/ beside
# the project (override with KCP_GOPROXY=/path/to/kcp-goproxy); everything else comes from the
# usual proxy.
#
#   hack/kcp/kcpgraph/test.sh                     # build, vet, and every test of cache/... (.ci/run)
#   hack/kcp/kcpgraph/test.sh -run TestX ./cache/server/integration   # build, vet, then go test ARGS
set -euo pipefail

cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
proxy=${KCP_GOPROXY:-$(dirname "$root")/shared/kcp-goproxy}
if [ ! -f "$proxy/github.com/kcp-dev/client-go/@v/list" ]; then
  echo "no kcp-goproxy at $proxy (set KCP_GOPROXY to the directory)" >&2
  exit 1
fi
proxy=$(cd "$proxy" && pwd)
GOPROXY="file://$proxy,$(go env GOPROXY)"
GONOSUMDB=github.com/kcp-dev/apimachinery,github.com/kcp-dev/client-go,github.com/kcp-dev/code-generator
export GOPROXY GONOSUMDB

m=github.com/kcp-cache/kcp-cache
t0=$SECONDS
echo "== go build -tags kcp (kcp v0.32.3's module graph)"
go build -tags kcp ./... $m/...
echo "== go vet -tags kcp"
go vet -tags kcp ./... $m/...
echo "   build and vet: $((SECONDS - t0)) s"

t1=$SECONDS
if [ $# -gt 0 ]; then
  # Package paths given relative to the repository (./cache/...) name the same packages here.
  args=()
  for a in "$@"; do
    case $a in ./*) args+=("$m/${a#./}") ;; *) args+=("$a") ;; esac
  done
  echo "== go test -tags kcp ${args[*]}"
  go test -tags kcp -count=1 -timeout 20m "${args[@]}"
else
  echo "== go test -tags kcp $m/cache/..."
  go test -tags kcp -count=1 -timeout 20m $m/cache/...
fi
echo "   tests: $((SECONDS - t1)) s"
