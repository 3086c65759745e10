// Package profiler serves Go's profiler (net/http/pprof) on a listener of
// its own, as kcp's servers do with --profiler-address: plain HTTP, no
// authentication, so it belongs on loopback or a port only operators reach.
package profiler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/klog/v2"
)

// Server is a running profiler endpoint.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Start listens on addr at once (so a taken port is an error of the caller,
// not a log line later) and serves /debug/pprof/ there until Close.
func Start(ctx context.Context, addr string) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--profiler-address: %w", err)
	}
	// A mux of its own: net/http/pprof's init registers on the default
	// mux, which this process does not otherwise serve.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: l.Addr().String(),
		done: make(chan struct{}),
	}
	logger := klog.FromContext(ctx).WithName("profiler")
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Profiler stopped serving", "address", s.addr)
		}
	}()
	logger.Info("Serving the Go profiler", "url", "http://"+s.addr+"/debug/pprof/")
	return s, nil
}

// Addr is the address the profiler listens on (with the port chosen when
// addr asked for port 0).
func (s *Server) Addr() string { return s.addr }

// Close stops serving, ending open requests (a CPU profile may run for
// many seconds), and waits for the serving goroutine.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}
