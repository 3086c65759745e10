// Command demo is the main job of kcp-cache in one process: it starts a
// cache server on an embedded etcd and two shards that push into it, then
// shows shard "beta" resolving an APIExport that lives on shard "alpha"
// through the cache, and still resolving it after alpha is stopped, and a
// user reading alpha's marked workspace through kcp's read-only fallback
// (cache/fallback) while alpha is down. Last,
// two regions: caches "east" and "west" that mirror each other, and what
// west serves of east's partitions while east is lost and once it is back.
//
//	go run ./examples/demo
//
// Server logs go to <dir>/servers.log; the steps go to standard output. It
// exits 0 when every step succeeded.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	dir := flag.String("dir", "", "directory for the servers' data and logs (default: a new temporary directory, removed afterwards)")
	keep := flag.Bool("keep", false, "keep the data directory")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()

	root := *dir
	if root == "" {
		tmp, err := os.MkdirTemp("", "kcp-cache-demo-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		root = tmp
		if !*keep {
			defer os.RemoveAll(tmp)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	d, err := newDemo(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = errors.Join(d.run(ctx), d.stop())
	if err != nil {
		fmt.Printf("\nFAILED: %v\nServer logs: %s\n", err, filepath.Join(root, "servers.log"))
		d.tailLog(os.Stdout, 30)
		os.Exit(1)
	}
	fmt.Println("\nDemo finished: every step succeeded.")
}
