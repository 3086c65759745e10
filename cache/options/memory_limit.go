package options

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The memory limit: what the server may hold in memory before the kernel
// kills it. A cache holds every object it serves in its watch cache, so it
// grows with its data; run in a container with a memory limit (kcp-operator
// gives a CacheServer 2 GiB by default), it must collect before the
// container's limit is reached and refuse new objects before its live data
// can no longer fit, rather than be OOM-killed and lose its in-memory data
// and every client's watch at once.
const (
	// MemoryLimitAuto reads the limit from the process's memory cgroup
	// (cgroup v2 memory.max, v1 memory.limit_in_bytes).
	MemoryLimitAuto = "auto"
	// MemoryLimitNone sets no limit.
	MemoryLimitNone = "none"

	// goMemoryLimitPercent is the share of the limit given to Go's
	// runtime (debug.SetMemoryLimit): the rest is for what the runtime
	// does not count (an embedded etcd's memory-mapped database pages,
	// thread stacks outside the heap, the binary).
	goMemoryLimitPercent = 90
	// FullPercent is the share of the limit that the live heap (after a
	// collection) may reach before new objects are refused: below
	// goMemoryLimitPercent by enough for a collection cycle's garbage, a
	// burst of LISTs, and the next start, which holds the data more than
	// once while the embedded etcd replays its log and the watch caches
	// fill (hack/ci/image.sh: at 60%, a server filled with 256 KiB objects
	// under a 256 MiB limit was killed by the kernel at its next start; at
	// 40% it restarts).
	FullPercent = 40
)

// ResolveMemoryLimit returns the memory limit in bytes (0: none) and where
// it came from.
func (o *LimitOptions) ResolveMemoryLimit() (int64, string, error) {
	switch o.MemoryLimit {
	case MemoryLimitNone:
		return 0, "--memory-limit=none", nil
	case MemoryLimitAuto, "":
		limit, where := cgroupMemoryLimit("/proc/self/cgroup", "/sys/fs/cgroup")
		return limit, where, nil
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil || q.Sign() <= 0 {
		return 0, "", fmt.Errorf("--memory-limit must be %q, %q or a positive quantity (e.g. 2Gi), got %q", MemoryLimitAuto, MemoryLimitNone, o.MemoryLimit)
	}
	return q.Value(), "--memory-limit", nil
}

// cgroupMemoryLimit reads the memory limit of the process's cgroup:
// cgroup v2's memory.max or v1's memory.limit_in_bytes, at the cgroup's
// path from procCgroup below root, and at root itself (a container with
// its own cgroup namespace sees its cgroup there). The smallest limit
// found counts; 0 when there is none ("max", or v1's near-2^63 value).
func cgroupMemoryLimit(procCgroup, root string) (int64, string) {
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, "no cgroup (" + err.Error() + ")"
	}
	var candidates []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, filepath.Join(root, parts[2], "memory.max"), filepath.Join(root, "memory.max"))
		case hasController(parts[1], "memory"):
			candidates = append(candidates,
				filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
		}
	}
	var limit int64
	where := "no memory limit in the process's cgroup"
	for _, f := range candidates {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		// "max" (v2) does not parse; v1 says "none" with a page-rounded
		// 2^63-1.
		if err != nil || v <= 0 || v >= 1<<62 {
			continue
		}
		if limit == 0 || v < limit {
			limit, where = v, f
		}
	}
	return limit, where
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// ApplyMemoryLimit sets the Go runtime's memory limit of the process to
// 90% of the server's (a standalone server's process is the server's own;
// a mounted cache leaves its host's as it is), unless GOMEMLIMIT is set in
// the environment, which wins. It returns the limit set (0: none) and the
// server's limit and its source, for the log.
func (o CompletedOptions) ApplyMemoryLimit() (goLimit, limit int64, source string, err error) {
	limit, source, err = o.Limits.ResolveMemoryLimit()
	if err != nil || limit == 0 {
		return 0, limit, source, err
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, limit, source + " (GOMEMLIMIT set: the Go runtime keeps it)", nil
	}
	goLimit = limit / 100 * goMemoryLimitPercent
	debug.SetMemoryLimit(goLimit)
	return goLimit, limit, source, nil
}
