package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages kcp imports to mount the cache in-process
// (hack/kcp/kcp-in-process.patch) must not need a module kcp v0.32.3 does
// not: kcp's build then wants the module in its go.mod and go.sum, and
// adding etcdutl, which only the operator's backup tools use (package
// backupfile), raises two versions kcp selects (go-runewidth 0.0.12 to
// 0.0.16, uniseg 0.2.0 to 0.4.7).
func TestMountedPackagesDoNotNeedEtcdutl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	mounted := []string{"cache", "cache/client", "cache/hook", "cache/options", "cache/replication", "cache/server"}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	for _, p := range mounted {
		args = append(args, "github.com/kcp-cache/kcp-cache/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var found []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.etcd.io/etcd/etcdutl/") {
			found = append(found, p)
		}
	}
	if len(found) > 0 {
		t.Errorf("the packages kcp mounts import etcdutl: %v", found)
	}
	if !strings.Contains(string(out), "go.etcd.io/etcd/server/v3/embed\n") {
		// The oracle: the list is of the real dependencies (the server
		// embeds etcd), not an empty answer.
		t.Errorf("go list did not list the server's dependencies:\n%.2000s", out)
	}
}
