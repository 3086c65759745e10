package integration_test

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// ownCode marks a goroutine as one the server (or its fixture) started:
// its stack, or the frame that created it, is in this project's server
// packages or in etcd (the embedded member, the etcd clients). Goroutines
// upstream keeps on its own (idle HTTP connections of client-go's shared
// transports, klog's flusher) are not counted.
var ownCode = []string{
	"github.com/kcp-cache/kcp-cache/cache/",
	"go.etcd.io/etcd/",
	// etcd clients' connections, which only etcd clients open here.
	"google.golang.org/grpc",
}

// goroutines returns the stacks of the running goroutines that run or were
// created by ownCode, by goroutine id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		stack := string(g)
		header, _, _ := strings.Cut(stack, "\n")
		id, _, _ := strings.Cut(strings.TrimPrefix(header, "goroutine "), " ")
		for _, code := range ownCode {
			if strings.Contains(stack, code) {
				out[id] = stack
				break
			}
		}
	}
	return out
}

// leftOver polls until no goroutine of ownCode runs that did not run in
// before, and returns the stacks of those still running at the deadline.
func leftOver(before map[string]string, deadline time.Duration) []string {
	var left []string
	for end := time.Now().Add(deadline); ; time.Sleep(50 * time.Millisecond) {
		left = left[:0]
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 || time.Now().After(end) {
			return left
		}
	}
}

// Every goroutine a server starts (its loops, storage, etcd clients, the
// embedded etcd, a mounted cache's host) has ended once Stop returns:
// Close awaits them, in the order it states. The test is not parallel, so
// that no other test's servers start goroutines meanwhile.
func TestStopLeavesNoGoroutineOfTheServerBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts cachetest.Options
	}{
		{"standalone", cachetest.Options{}},
		{"mounted in a host", cachetest.Options{Mounted: true, HostShard: "amber"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goroutines()
			ctx := klog.NewContext(testContext(t), klog.Background())
			srv, err := cachetest.Start(ctx, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			started := 0
			for id := range goroutines() {
				if _, ok := before[id]; !ok {
					started++
				}
			}
			if started == 0 {
				t.Fatal("a running server shows no goroutine of its own: the accounting sees nothing")
			}
			if err := srv.Stop(); err != nil {
				t.Fatalf("stopping: %v", err)
			}
			if left := leftOver(before, 10*time.Second); len(left) > 0 {
				t.Fatalf("%d goroutines of the server still run after Stop:\n\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
}
