package options

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimitReadsV1AndV2(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		proc   string
		files  map[string]string
		want   int64
		source string
	}{{
		name:   "v2, the process's cgroup",
		proc:   "0::/pod/container\n",
		files:  map[string]string{"pod/container/memory.max": "2147483648\n"},
		want:   2 << 30,
		source: "pod/container/memory.max",
	}, {
		name:  "v2 without a limit",
		proc:  "0::/pod/container\n",
		files: map[string]string{"pod/container/memory.max": "max\n"},
	}, {
		name:   "v1 in a hybrid set-up, the cgroup namespace's root the smaller",
		proc:   "12:cpu,cpuacct:/x\n4:memory:/process/abc\n0::/\n",
		files:  map[string]string{"memory/process/abc/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.limit_in_bytes": "268435456\n"},
		want:   256 << 20,
		source: "memory/memory.limit_in_bytes",
	}, {
		name:  "v1 unlimited",
		proc:  "4:memory:/\n",
		files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
	}, {
		name: "no files",
		proc: "4:memory:/gone\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			write(t, filepath.Join(dir, "proc-cgroup"), tc.proc)
			for f, c := range tc.files {
				write(t, filepath.Join(root, f), c)
			}
			got, where := cgroupMemoryLimit(filepath.Join(dir, "proc-cgroup"), root)
			if got != tc.want {
				t.Fatalf("limit %d (%s), want %d", got, where, tc.want)
			}
			if tc.source != "" && where != filepath.Join(root, tc.source) {
				t.Errorf("source %s, want %s", where, filepath.Join(root, tc.source))
			}
		})
	}
}

func TestMemoryLimitFlagValues(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
		bad   bool
	}{{value: "none"}, {value: "2Gi", want: 2 << 30}, {value: "512Mi", want: 512 << 20}, {value: "-1Gi", bad: true}, {value: "lots", bad: true}, {value: "0", bad: true}} {
		o := NewLimitOptions()
		o.MemoryLimit = tc.value
		got, _, err := o.ResolveMemoryLimit()
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("--memory-limit=%s: %d, %v; want %d, error %v", tc.value, got, err, tc.want, tc.bad)
		}
		if errs := o.Validate(); (len(errs) > 0) != tc.bad {
			t.Errorf("--memory-limit=%s: Validate said %v", tc.value, errs)
		}
	}
}
