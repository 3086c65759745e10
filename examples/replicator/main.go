// Command replicator runs beside a stock kcp shard and pushes what users
// read in the shard's marked workspaces into its user-read partition of a
// kcp cache, <shard-name>:readonly, with that partition's heartbeat:
//
//	go run ./examples/replicator --kubeconfig=.kcp/admin.kubeconfig --shard-name=root \
//	  --cache-kubeconfig=cache.kubeconfig \
//	  --user-read-workspaces=root --user-read-workspace-types=root:organization
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/kcp-cache/kcp-cache/examples/replicator/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
