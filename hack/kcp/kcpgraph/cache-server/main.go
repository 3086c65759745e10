//go:build kcp

// Command cache-server is examples/cache-server built inside kcp's module
// graph (kcp's Kubernetes fork), to check the kcp build of the server at run
// time: same flags, same wire behaviour, same etcd keys.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/kcp-cache/kcp-cache/examples/cache-server/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand()))
}
