package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryLimit confines a server process of the scale phase to a memory
// cgroup of its own, a child of the bench's, so that a server that outgrows
// the limit is killed alone (and the row says so) instead of taking the
// machine down. It handles both cgroup hierarchies: v1 (a "memory"
// controller line in /proc/self/cgroup; memory.limit_in_bytes,
// memory.oom_control) and v2 (the "0::" line; memory.max, memory.events).
type memoryLimit struct {
	dir   string
	v2    bool
	bytes int64
}

// newMemoryLimit creates the cgroup name with a limit of limit bytes.
func newMemoryLimit(name string, limit int64) (*memoryLimit, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var v1Path, v2Path string
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1Path, found = parts[2], true
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path = parts[2]
		}
	}
	m := &memoryLimit{bytes: limit}
	limitFile := "memory.limit_in_bytes"
	switch {
	case found:
		m.dir = filepath.Join("/sys/fs/cgroup/memory", v1Path, name)
	case v2Path != "":
		m.dir, m.v2, limitFile = filepath.Join("/sys/fs/cgroup", v2Path, name), true, "memory.max"
	default:
		return nil, errors.New("no memory cgroup found in /proc/self/cgroup")
	}
	if err := os.Mkdir(m.dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("creating a memory cgroup for -scale-memory-limit: %w", err)
	}
	if err := os.WriteFile(filepath.Join(m.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return nil, fmt.Errorf("setting %s: %w", limitFile, err)
	}
	return m, nil
}

// add moves process pid into the cgroup.
func (m *memoryLimit) add(pid int) error {
	return os.WriteFile(filepath.Join(m.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// oomKills is how many processes the kernel killed in the cgroup for its
// limit (the "oom_kill" counter; 0 where the kernel does not count them).
func (m *memoryLimit) oomKills() int {
	file := "memory.oom_control"
	if m.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(m.dir, file))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// String is the limit as the rows name it, e.g. "6 GiB memory limit".
func (m *memoryLimit) String() string {
	return resource.NewQuantity(m.bytes, resource.BinarySI).String() + " memory limit"
}

// remove deletes the cgroup once its processes have exited.
func (m *memoryLimit) remove() { _ = os.Remove(m.dir) }
