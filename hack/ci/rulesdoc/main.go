// Command rulesdoc rewrites the table of authorization rules in
// docs/security.md from cache/server/authorization/rules.go. Run it from the
// module's root after changing a rule:
//
//	go run ./hack/ci/rulesdoc
//
// TestPolicyDocIsCurrent (cache/server/authorization) fails until it is run.
package main

import (
	"fmt"
	"os"

	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
)

func main() {
	if err := run(authorization.PolicyDocPath); err != nil {
		fmt.Fprintln(os.Stderr, "rulesdoc:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := authorization.WithPolicyDoc(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, updated, 0o644)
}
