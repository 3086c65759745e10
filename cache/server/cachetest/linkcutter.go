package cachetest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// LinkCutter forwards TCP connections to a cache and can cut them all, as
// a network partition between two regions would.
type LinkCutter struct {
	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

// NewLinkCutter returns a link that forwards until Cut.
func NewLinkCutter() *LinkCutter {
	return &LinkCutter{conns: map[net.Conn]struct{}{}}
}

// Via starts forwarding a loopback port to the https URL host and returns
// the URL of that port.
func (l *LinkCutter) Via(t testing.TB, host string) string {
	t.Helper()
	target := strings.TrimPrefix(host, "https://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ln.Close()
		l.Cut()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			down := l.down
			l.mu.Unlock()
			if down {
				_ = in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			l.track(in, out)
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return "https://" + ln.Addr().String()
}

func (l *LinkCutter) track(conns ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range conns {
		l.conns[c] = struct{}{}
	}
}

// Cut closes every forwarded connection and refuses new ones.
func (l *LinkCutter) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for c := range l.conns {
		_ = c.Close()
	}
	l.conns = map[net.Conn]struct{}{}
}

// Restore forwards new connections again.
func (l *LinkCutter) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}
