// Command cache-server runs a standalone kcp cache server with an embedded
// etcd. It writes an admin kubeconfig to <root-directory>/cache.kubeconfig.
//
//	go run ./examples/cache-server --root-directory=.kcp-cache
//	kubectl --kubeconfig .kcp-cache/cache.kubeconfig \
//	  --server "$(kubectl --kubeconfig .kcp-cache/cache.kubeconfig config view -o jsonpath='{.clusters[0].cluster.server}')/services/cache/shards/amber/clusters/root" \
//	  get apiexports
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/kcp-cache/kcp-cache/examples/cache-server/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
