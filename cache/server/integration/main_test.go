package integration

import (
	"flag"
	"os"
	"testing"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// quickParallel is how many parallel tests the quick path (-short) runs at
// once when -parallel is not given. Each test here mostly waits: for its
// embedded etcd to sync, for a server to become ready, for a watch event.
// At the default (GOMAXPROCS, 2 on a small machine) the package used a
// core at most; four at a time took it from about 110 s to 85 s.
const quickParallel = "4"

func TestMain(m *testing.M) {
	// A child process that runs a member of a memory group for a test
	// (cachetest.StartMemoryGroupWithProcesses) runs only that.
	cachetest.RunMemberIfAsked()
	flag.Parse()
	if testing.Short() {
		given := false
		flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
		if !given {
			if err := flag.Set("test.parallel", quickParallel); err != nil {
				panic(err)
			}
		}
	}
	os.Exit(m.Run())
}
