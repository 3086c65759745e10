// Command flagsdoc writes docs/flags.md from the flag sets of
// examples/cache-server. Run it from the module's root after changing a flag:
//
//	go run ./hack/ci/flagsdoc
//
// TestFlagsDocIsCurrent (examples/cache-server/app) fails until it is run.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kcp-cache/kcp-cache/examples/cache-server/app"
)

func main() {
	out := flag.String("o", app.FlagsDocPath, "file to write")
	flag.Parse()
	doc, err := app.FlagsDoc()
	if err == nil {
		err = os.WriteFile(*out, doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flagsdoc:", err)
		os.Exit(1)
	}
}
