package robustness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/filters"
)

// fullDiskSize is the size of the tmpfs the full-disk shape's etcd keeps
// its data on: room for the default guard's threshold (256 MiB), a WAL
// segment (64 MB) and the data. A long run's traffic (some 400 writes a
// second) leaves up to five WAL segments (etcd keeps five) and a database
// of several revisions per write between compactions: it gets 2 GiB, so
// that the freed disk is above the threshold again. A tmpfs takes memory
// only for what is written.
func fullDiskSize() string {
	if *duration > time.Minute {
		return "2g"
	}
	return "512m"
}

// guardReaction bounds how long after the disk fills (or is freed) the
// guard refuses (or takes) writes: it reads the free space at most once
// per filters.DiskSamplePeriod; the rest is a loaded machine's margin.
const guardReaction = filters.DiskSamplePeriod + 4*time.Second

// mountTmpfs mounts a tmpfs of size under a temporary directory and
// unmounts it when the test ends (after whatever the test started on it
// has stopped: cleanups run last first); it skips the test where the
// process may not mount.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("a full disk needs a file system of its own: mounting a tmpfs: %v (run as root where mount(2) is allowed)", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting the tmpfs %s: %v", dir, err)
		}
	})
	return dir
}

// fill takes the space of dir's file system in the file filler until at
// most leave bytes are free (fallocate: tmpfs allocates its pages at once,
// without writing them), and returns what is free then.
func fill(dir, filler string, leave uint64) (uint64, error) {
	free, err := filters.FreeDisk(dir)
	if err != nil {
		return 0, err
	}
	if free <= leave {
		return free, nil
	}
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	st, err := f.Stat()
	if err == nil {
		err = syscall.Fallocate(int(f.Fd()), 0, st.Size(), int64(free-leave))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("filling %s: %w", dir, err)
	}
	return filters.FreeDisk(dir)
}

// window is a time in a partition's history (its recorder's clock) when
// the disk was below the guard's threshold and the guard had had time to
// see it: every create and update answered then must be refused.
type window struct{ from, to int64 }

// fullDisk is the full-disk shape's cache, a server in a child process
// whose own embedded etcd keeps its data on a tmpfs of the test's, and
// the faults that fill and free that tmpfs.
type fullDisk struct {
	proc   *cachetest.MemberProcess
	mount  string
	filler string
	// minFree is the server's --embedded-etcd-min-free-disk-bytes; guard
	// false runs the server without the guard (a seeded bug), which the
	// faults still expect.
	minFree uint64
	// probe writes and reads the partition as the shard, directly at the
	// cache: the faults' own requests, not part of the history.
	probe  dynamic.ResourceInterface
	admin  *rest.Config
	part   *partition
	found  func(Violation)
	probes int

	mu      sync.Mutex
	filled  bool
	opened  int64 // the open window's start, while filled
	windows []window
	// restarts are the times the cache was restarting: it answers
	// nothing then, reads included.
	restarts []window
	// fills and trips count the fills and those the guard was seen to
	// refuse writes for, for the log.
	fills, trips int
}

// startFullDisk is the full-disk shape: one cache, its etcd on a tmpfs of
// its own, shard s written and read through it. With guard false the
// server runs with --embedded-etcd-min-free-disk-bytes=0.
func startFullDisk(t *testing.T, guard bool) (*cluster, *fullDisk) {
	t.Helper()
	mount := mountTmpfs(t, fullDiskSize())
	var args []string
	if !guard {
		args = append(args, "--embedded-etcd-min-free-disk-bytes=0")
	}
	proc := cachetest.StartServerProcessWith(t, cachetest.ServerProcessOptions{Name: "full-disk", Args: args, EmbeddedEtcdDirectory: filepath.Join(mount, "etcd")})
	c := &cluster{parts: []*partition{partitionWith(t, proc.ShardConfig(t, "s"), "s")}}
	admin, err := proc.Config()
	if err != nil {
		t.Fatal(err)
	}
	probeCfg := client.Unthrottled(proc.ShardConfig(t, "s"))
	probeCfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"})
	d, err := dynamic.NewForConfig(probeCfg)
	if err != nil {
		t.Fatal(err)
	}
	fd := &fullDisk{
		proc: proc, mount: mount, filler: filepath.Join(mount, "filler"),
		// The guard's threshold is the default's either way: without the
		// guard, the fill is the same, and the expectations are.
		minFree: options.DefaultEmbeddedEtcdMinFreeDiskBytes,
		probe:   d.Resource(Resource), admin: admin, part: c.parts[0], found: c.findings.add,
	}
	// CI's run (the default duration, faults every 3 s) meets the fill,
	// a restart on the nearly full disk and the freeing: 4 s more.
	c.defaultExtra = 4 * time.Second
	c.faultList = []fault{fd.fillOf(), fd.restartOf("on the nearly full disk"), fd.freeOf(), fd.restartOf("on the freed disk")}
	c.afterTraffic = fd.check
	return c, fd
}

// violation records one of the full disk's own findings.
func (fd *fullDisk) violation(format string, args ...any) {
	fd.found(Violation{Check: "full-disk", Details: fmt.Sprintf(format, args...)})
}

// probeWrite creates a new object of the faults' own, once, as the shard.
func (fd *fullDisk) probeWrite(ctx context.Context) (string, error) {
	fd.probes++
	name := fmt.Sprintf("probe-%d", fd.probes)
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, err := fd.probe.Create(rctx, object(name, "probe", 0), metav1.CreateOptions{})
	return name, err
}

// refusedWithReason reports whether err is the guard's answer: 507 with
// its reason, saying nothing was written.
func refusedWithReason(err error) bool {
	status, ok := err.(apierrors.APIStatus)
	return ok && status.Status().Code == http.StatusInsufficientStorage && status.Status().Reason == filters.ReasonInsufficientStorage &&
		strings.Contains(status.Status().Message, "nothing was written")
}

// untilRefused polls with the faults' own writes, for guardReaction, until
// one is refused with the guard's 507; a write accepted meanwhile is
// deleted again. It returns the last answer when none was refused.
func (fd *fullDisk) untilRefused(ctx context.Context) (bool, string) {
	deadline := time.Now().Add(guardReaction)
	last := "none"
	for {
		name, err := fd.probeWrite(ctx)
		if refusedWithReason(err) {
			return true, ""
		}
		last = answer(err)
		if err == nil {
			dctx, cancel := context.WithTimeout(ctx, requestTimeout)
			_ = fd.probe.Delete(dctx, name, metav1.DeleteOptions{})
			cancel()
		}
		if time.Now().After(deadline) {
			return false, last
		}
		pause(ctx)
	}
}

// servesReads checks that a consistent list and /readyz answer 200 (a
// cache that takes no writes still serves reads); a read that fails is
// tried again for guardReaction, as a client would.
func (fd *fullDisk) servesReads(ctx context.Context) error {
	hc, err := rest.HTTPClientFor(fd.admin)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(guardReaction)
	for {
		err = func() error {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			if _, err := fd.probe.List(rctx, metav1.ListOptions{}); err != nil {
				return fmt.Errorf("a consistent list: %s", answer(err))
			}
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, kcpcache.JoinHostPath(fd.admin.Host, "/readyz"), nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("/readyz: %w", err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("/readyz answered %d", resp.StatusCode)
			}
			return nil
		}()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		pause(ctx)
	}
}

// fillOf fills the tmpfs until half the guard's threshold is free: room
// still for etcd, well below the threshold. Within guardReaction the
// guard must refuse a write with 507 and its reason, reads and /readyz
// must go on; from then until the disk is freed every create and update
// must be refused (check).
func (fd *fullDisk) fillOf() fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		// The fault's checks run to their end when the traffic ends
		// meanwhile: the run waits for them.
		ctx = context.WithoutCancel(ctx)
		free, err := fill(fd.mount, fd.filler, fd.minFree/2)
		if err != nil {
			t.Errorf("filling the disk: %v", err)
			return
		}
		note(fmt.Sprintf("the disk filled: %d MiB free (the guard at %d MiB)", free>>20, fd.minFree>>20))
		fd.mu.Lock()
		fd.fills++
		fd.mu.Unlock()
		refused, last := fd.untilRefused(ctx)
		if !refused {
			fd.violation("no write was refused with 507 %s within %s of the disk's fill to %d MiB free (below %d MiB); the last answer: %s",
				filters.ReasonInsufficientStorage, guardReaction, free>>20, fd.minFree>>20, last)
		}
		fd.mu.Lock()
		if refused {
			fd.trips++
		}
		// Without a refusal the guard has had its time all the same.
		fd.filled, fd.opened = true, fd.part.rec.Now()
		fd.mu.Unlock()
		if err := fd.servesReads(ctx); err != nil {
			fd.violation("reads on the nearly full disk: %v, want them served", err)
		}
	}
}

// freeOf removes the filler: within guardReaction a write must be taken
// again.
func (fd *fullDisk) freeOf() fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		ctx = context.WithoutCancel(ctx)
		fd.mu.Lock()
		if fd.filled {
			fd.windows = append(fd.windows, window{fd.opened, fd.part.rec.Now()})
			fd.filled = false
		}
		fd.mu.Unlock()
		if err := os.Remove(fd.filler); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("freeing the disk: %v", err)
			return
		}
		free, _ := filters.FreeDisk(fd.mount)
		note(fmt.Sprintf("the disk freed: %d MiB free", free>>20))
		deadline := time.Now().Add(guardReaction)
		for {
			name, err := fd.probeWrite(ctx)
			if err == nil {
				dctx, cancel := context.WithTimeout(ctx, requestTimeout)
				_ = fd.probe.Delete(dctx, name, metav1.DeleteOptions{})
				cancel()
				return
			}
			if time.Now().After(deadline) {
				fd.violation("a write %s after the disk was freed (%d MiB free): %s, want it taken", guardReaction, free>>20, answer(err))
				return
			}
			pause(ctx)
		}
	}
}

// restartOf restarts the cache cleanly on its data (when: where the disk
// is). On the nearly full disk the start must succeed (its own writes go
// on) and the guard still refuse writes.
func (fd *fullDisk) restartOf(when string) fault {
	return func(ctx context.Context, t *testing.T, note func(string)) {
		ctx = context.WithoutCancel(ctx)
		note("restart of the cache " + when)
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		from := fd.part.rec.Now()
		err := fd.proc.Restart(rctx)
		fd.mu.Lock()
		fd.restarts = append(fd.restarts, window{from, fd.part.rec.Now()})
		fd.mu.Unlock()
		if err != nil {
			fd.violation("a restart of the cache %s: %v", when, err)
			return
		}
		fd.mu.Lock()
		filled := fd.filled
		fd.mu.Unlock()
		if !filled {
			return
		}
		if refused, last := fd.untilRefused(ctx); !refused {
			fd.violation("no write was refused with 507 %s within %s of a restart on the nearly full disk; the last answer: %s", filters.ReasonInsufficientStorage, guardReaction, last)
		}
	}
}

// check judges the history's writes while the disk was nearly full: each
// create and update answered then must be refused with 507 and the
// guard's reason, or get no answer from the cache (a restart: a
// connection refused, the test proxy's 502, a timeout), or 503 with a
// reason; never accepted, never answered by storage, never a 500. Reads
// must have been served in every window of a second or more. The
// convergence of the history checks that nothing acknowledged is lost
// once the disk is freed. A window that overlaps a restart need not hold
// a read: the cache answers nothing while it restarts (a long run met a
// window of 3.4 s that a restart on the nearly full disk took up), and
// the fill's own probe checks the reads.
func (fd *fullDisk) check(_ context.Context, t *testing.T, _ func(string)) []Violation {
	fd.mu.Lock()
	windows := slices.Clone(fd.windows)
	if fd.filled {
		// The run ended on a full disk.
		windows = append(windows, window{fd.opened, fd.part.rec.Now()})
	}
	t.Logf("full disk: %d fills, %d of them refused by the guard within %s; %d windows judged", fd.fills, fd.trips, guardReaction, len(windows))
	restarts := slices.Clone(fd.restarts)
	fd.mu.Unlock()
	return checkFullDisk(fd.part.rec.History(), windows, restarts)
}

// checkFullDisk is check's judgement of h's operations in windows; a
// window that overlaps one of restarts (the cache answered nothing for a
// while) need not hold a read.
func checkFullDisk(h History, windows, restarts []window) []Violation {
	var out []Violation
	for _, w := range windows {
		reads, bad := 0, 0
		for _, op := range h.Ops {
			if op.Call < w.from || op.Return > w.to {
				continue
			}
			switch op.Input.Op {
			case OpGet:
				reads++
				continue
			case OpCreate, OpUpdate:
			default:
				continue
			}
			o := op.Output
			var why string
			switch {
			case o.Status == StatusRefused && o.Reason != string(filters.ReasonInsufficientStorage):
				why = fmt.Sprintf("507 with reason %q", o.Reason)
			case o.Status == StatusRefused:
			case o.Status == StatusUnknown && (o.Code == 0 || o.Code == http.StatusBadGateway && o.Reason == ""):
				// No answer from the cache: it was restarting.
			case o.Status == StatusUnknown && o.Code == http.StatusServiceUnavailable && o.Reason != "":
			case o.Status == StatusUnknown:
				why = fmt.Sprintf("%d %q (%s)", o.Code, o.Reason, o.Error)
			default:
				why = "answered " + o.Status + " (it reached storage)"
			}
			if why != "" {
				if bad++; bad <= 5 {
					out = append(out, Violation{Check: "full-disk", Details: fmt.Sprintf("the %s of %s=%q on the nearly full disk was %s, want 507 %s",
						op.Input.Op, op.Input.Key, op.Input.Value, why, filters.ReasonInsufficientStorage)})
				}
			}
		}
		if bad > 5 {
			out = append(out, Violation{Check: "full-disk", Details: fmt.Sprintf("%d more writes on the nearly full disk were not refused", bad-5)})
		}
		restarted := slices.ContainsFunc(restarts, func(r window) bool { return r.from < w.to && r.to > w.from })
		if reads == 0 && w.to-w.from >= int64(time.Second) && !restarted {
			out = append(out, Violation{Check: "full-disk", Details: fmt.Sprintf("no consistent read was answered during %s on the nearly full disk", time.Duration(w.to-w.from).Round(time.Millisecond))})
		}
	}
	return out
}

// TestRobustnessFullDisk: traffic against one cache whose etcd's disk
// fills (to half the guard's threshold), stays nearly full across a
// restart, and is freed: every write on the nearly full disk is refused
// with 507 (or gets no answer while the cache restarts), reads go on,
// and the history holds every promise: nothing acknowledged is lost.
func TestRobustnessFullDisk(t *testing.T) {
	c, _ := startFullDisk(t, true)
	runShape(t, "full disk", c, func(rep Report) int { return rep.Reads })
}

// TestSeededFullDiskIsCaught: a cache without the guard takes writes on a
// nearly full disk; the full disk's own check names it.
func TestSeededFullDiskIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("a cache in a child process on a tmpfs: skipped with -short")
	}
	c, _ := startFullDisk(t, false)
	fillFault, freeFault := c.faultList[0], c.faultList[2]
	// The fill at 3 s, its check until 8 s, the freeing at 9 s: writes
	// taken on the nearly full disk in between.
	rep := c.run(t, 10*time.Second, func(ctx context.Context, note func(string), n int) {
		switch n {
		case 0:
			fillFault(ctx, t, note)
		case 1:
			freeFault(ctx, t, note)
		}
	})
	logReport(t, "without the guard", rep)
	var checks []string
	for _, v := range rep.Violations {
		checks = append(checks, v.Check)
	}
	if !slices.Contains(checks, "full-disk") {
		t.Errorf("a cache without the guard: violations %v, want one of full-disk", checks)
	}
}

// TestFullDiskWithoutTheGuardEndsTheCache measures what the embedded etcd
// does when its disk is full (the guard off): it does not refuse the
// write, it ends the whole process (lg.Fatal at its next commit), and
// reads die with it; started again on the freed disk, the cache holds
// every write it acknowledged. If etcd ever refuses instead, this test
// fails, and the guard's reason (docs/testing.md) must be looked at again.
func TestFullDiskWithoutTheGuardEndsTheCache(t *testing.T) {
	if !*processSeeded {
		t.Skip("fills a cache's disk until its etcd ends the process (about 5 s): run with -robustness.process-seeded")
	}
	mount := mountTmpfs(t, "256m")
	proc := cachetest.StartServerProcessWith(t, cachetest.ServerProcessOptions{
		Name: "enospc", Args: []string{"--embedded-etcd-min-free-disk-bytes=0"}, EmbeddedEtcdDirectory: filepath.Join(mount, "etcd"),
	})
	cfg := client.Unthrottled(proc.ShardConfig(t, "s"))
	cfg.Host += kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "s", Cluster: "root"})
	cfg.Timeout = requestTimeout
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exports := d.Resource(Resource)
	ctx := context.Background()
	acked := map[string]string{}
	for i := range 20 {
		name, value := fmt.Sprintf("before-%d", i), fmt.Sprintf("v%d", i)
		if _, err := exports.Create(ctx, object(name, value, 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a write before the fill: %v", err)
		}
		acked[name] = value
	}

	// Every byte taken: what fallocate leaves, small writes take.
	filler := filepath.Join(mount, "filler")
	if _, err := fill(mount, filler, 0); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	_ = f.Close()
	filled := time.Now()
	free, _ := filters.FreeDisk(mount)
	t.Logf("the disk is full: %d bytes free", free)

	// Writes until the process ends, for a minute at most.
	var first, afterFill string
	accepted := 0
	for i := 0; ; i++ {
		select {
		case <-proc.Exited():
		default:
			if time.Since(filled) < time.Minute {
				name, value := fmt.Sprintf("after-%d", i), fmt.Sprintf("w%d", i)
				_, err := exports.Create(ctx, object(name, value, 0), metav1.CreateOptions{})
				switch {
				case err == nil:
					acked[name] = value
					accepted++
				case first == "":
					first = answer(err)
				}
				afterFill = answer(err)
				continue
			}
			t.Fatalf("the cache still runs a minute after its disk filled: %d writes accepted since, the last answer %s", accepted, afterFill)
		}
		break
	}
	ended := time.Since(filled)
	if _, err := exports.Get(ctx, "before-0", metav1.GetOptions{}); err == nil {
		t.Error("a read answered after the process ended")
	}
	logs, err := os.ReadFile(proc.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	var fatal string
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, `"level":"fatal"`) {
			fatal = line
		}
	}
	t.Logf("the process ended %s after the fill (%v): %d writes accepted after the fill, the first refused one answered %q; etcd's last words: %s",
		ended.Round(time.Millisecond), proc.ExitError(), accepted, first, fatal)
	if !strings.Contains(fatal, "no space left on device") {
		t.Errorf("the process did not end on etcd's fatal \"no space left on device\": %q", fatal)
	}

	// Started again on the freed disk: every acknowledged write is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, cachetest.DefaultTimeout)
	defer cancel()
	if err := proc.StartAgain(rctx); err != nil {
		t.Fatalf("starting the cache again on the freed disk: %v", err)
	}
	list, err := exports.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for i := range list.Items {
		held[list.Items[i].GetName()] = valueOf(&list.Items[i])
	}
	lost := 0
	for name, value := range acked {
		if held[name] != value {
			lost++
			t.Errorf("the acknowledged write %s=%q: held as %q after the restart", name, value, held[name])
		}
	}
	t.Logf("restarted on the freed disk: %d acknowledged writes, %d of them lost; %d objects held", len(acked), lost, len(list.Items))
}

// The full-disk check judges each write answered while the disk was
// nearly full: refused with the guard's reason, unanswered, or 503 with a
// reason passes; accepted, answered by storage, a 503 without a reason or
// a 500 does not; a window without a read answered does not either.
func TestCheckFullDiskJudgesTheWritesOnTheNearlyFullDisk(t *testing.T) {
	const s = int64(time.Second)
	refused := Output{Status: StatusRefused, Code: 507, Reason: string(filters.ReasonInsufficientStorage)}
	read := Op{Input: Input{Op: OpGet, Key: "k"}, Output: Output{Status: StatusNotFound}, Call: 2 * s, Return: 2*s + 1}
	for _, tc := range []struct {
		name string
		out  Output
		ok   bool
	}{
		{"refused", refused, true},
		{"no answer", Output{Status: StatusUnknown, Error: "connection refused"}, true},
		{"the proxy's 502", Output{Status: StatusUnknown, Code: 502}, true},
		{"503 with a reason", Output{Status: StatusUnknown, Code: 503, Reason: "ServiceUnavailable"}, true},
		{"503 without a reason", Output{Status: StatusUnknown, Code: 503}, false},
		{"500", Output{Status: StatusUnknown, Code: 500, Reason: "InternalError"}, false},
		{"507 with another reason", Output{Status: StatusRefused, Code: 507, Reason: "Full"}, false},
		{"accepted", Output{Status: StatusOK, Value: "v", RV: 7}, false},
		{"answered by storage", Output{Status: StatusConflict}, false},
	} {
		h := History{Ops: []Op{
			read,
			{Input: Input{Op: OpCreate, Key: "k", Value: "v"}, Output: tc.out, Call: 2 * s, Return: 3 * s},
			// Outside the window: not judged.
			{Input: Input{Op: OpCreate, Key: "j", Value: "v"}, Output: Output{Status: StatusOK, RV: 3}, Call: s / 2, Return: s},
		}}
		if got := checkFullDisk(h, []window{{from: s, to: 4 * s}}, nil); (len(got) == 0) != tc.ok {
			t.Errorf("%s: violations %v, want ok %v", tc.name, got, tc.ok)
		}
	}
	h := History{Ops: []Op{{Input: Input{Op: OpCreate, Key: "k", Value: "v"}, Output: refused, Call: 2 * s, Return: 3 * s}}}
	if got := checkFullDisk(h, []window{{from: s, to: 4 * s}}, nil); len(got) != 1 || !strings.Contains(got[0].Details, "no consistent read") {
		t.Errorf("a window without a read: violations %v, want one naming it", got)
	}
	// A window the cache spent partly restarting may hold none.
	if got := checkFullDisk(h, []window{{from: s, to: 4 * s}}, []window{{from: 3 * s, to: 5 * s}}); len(got) != 0 {
		t.Errorf("a window with a restart and without a read: violations %v, want none", got)
	}
}
