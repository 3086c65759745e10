#!/usr/bin/env bash
# check.sh builds and vets every package of kcp-cache with the build tag kcp inside kcp's module
# graph (this module: kcp's requirements and its replace directives, k8s.io/* from kcp's
# Kubernetes fork), and with TESTS=1 also runs the server's tests there (unit and integration,
# including the tests only the kcp build has).
#
#   hack/kcpgraph/check.sh /path/to/kcp           # a kcp v0.32.3 source tree
#   TESTS=1 hack/kcpgraph/check.sh /path/to/kcp
#
# kcp's own staged modules (github.com/kcp-dev/apimachinery/v2, client-go, code-generator) come
# from that tree, linked at hack/kcpgraph/kcp-src: the module proxy this was written against
# answers 403 for them. Everything else comes from the module proxy.
set -euo pipefail

KCP_DIR=$(cd "${1:?usage: hack/kcpgraph/check.sh KCP_DIR}" && pwd)
cd "$(dirname "$0")"

# The fork this module replaces k8s.io/* with must be the one of the kcp tree.
want=$(grep -E '^\s*k8s.io/apiserver => ' go.mod | awk '{print $3, $4}')
got=$(grep -E '^\s*k8s.io/apiserver => ' "$KCP_DIR/go.mod" | awk '{print $3, $4}')
if [ "$want" != "$got" ]; then
  echo "kcp tree at $KCP_DIR replaces k8s.io/apiserver with '$got'; go.mod here has '$want'" >&2
  exit 1
fi
ln -sfn "$KCP_DIR" kcp-src

set -x
go build -tags kcp ./... github.com/kcp-cache/kcp-cache/...
go vet -tags kcp ./... github.com/kcp-cache/kcp-cache/...
if [ -n "${TESTS:-}" ]; then
  go test -tags kcp -count=1 github.com/kcp-cache/kcp-cache/cache/server/...
fi
