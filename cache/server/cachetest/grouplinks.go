package cachetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
)

// groupCertPrefix starts the common name of a member's certificate in its
// group (embeddedetcd.GenerateGroupTLS); the member's name follows.
const groupCertPrefix = "kcp-cache-memory-group-"

// GroupLinks stand between the members of an in-memory group: each
// member's peer URL is a proxy in front of the listener the member really
// listens on (--memory-peer-listen-url). A proxy holds the group's
// certificates (it derives them from the group's secret, as a member does)
// and knows every request's sender by its client certificate, whose name
// is the sender's member name, so a test can cut the link between two
// members both ways while every member keeps running: a partition of the
// group.
//
// A per-member TCP proxy could not: every member reaches a peer at the one
// peer URL in the membership, so such a proxy cannot tell which member
// dials, and etcd carries a message over a connection either end opened (a
// stream the receiver opened, or a request the sender posts).
type GroupLinks struct {
	names []string

	mu    sync.Mutex
	links map[[2]string]*groupLink
}

// groupLink is the link between two members.
type groupLink struct {
	cut bool
	// changed is closed when the link is cut or restored: forwarded
	// requests end at a cut, held ones at a restore.
	changed chan struct{}
}

// newGroupLinks is the links between members names, every one up.
func newGroupLinks(names []string) *GroupLinks {
	l := &GroupLinks{names: names, links: map[[2]string]*groupLink{}}
	for _, a := range names {
		for _, b := range names {
			if a < b {
				l.links[[2]string{a, b}] = &groupLink{changed: make(chan struct{})}
			}
		}
	}
	return l
}

func (l *GroupLinks) link(a, b string) *groupLink {
	if a > b {
		a, b = b, a
	}
	return l.links[[2]string{a, b}]
}

// Isolate cuts every link of the named members to the members not named:
// each side reaches only its own members. What a cut link carries ends,
// and new requests over it wait, as packets lost would, until the sender
// gives up or the link is restored.
func (l *GroupLinks) Isolate(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := map[string]bool{}
	for _, n := range names {
		in[n] = true
	}
	for pair, link := range l.links {
		if in[pair[0]] != in[pair[1]] && !link.cut {
			link.cut = true
			close(link.changed)
			link.changed = make(chan struct{})
		}
	}
}

// Heal restores every link.
func (l *GroupLinks) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, link := range l.links {
		if link.cut {
			link.cut = false
			close(link.changed)
			link.changed = make(chan struct{})
		}
	}
}

// state is the link between from and to now; nil for a sender that is
// not a member (the group's own probes name no member: they pass).
func (l *GroupLinks) state(from, to string) (cut bool, changed <-chan struct{}, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	link := l.link(from, to)
	if link == nil {
		return false, nil, false
	}
	return link.cut, link.changed, true
}

// serve starts the proxy at listen, in front of member to's listener at
// target, and stops it when the test ends.
func (l *GroupLinks) serve(t testing.TB, to string, listen, target *url.URL, certs embeddedetcd.TLSFiles) {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", certs.CAFile)
	}
	upstream := &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext:     (&net.Dialer{Timeout: time.Second}).DialContext,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     upstream,
		FlushInterval: -1,
		// A request ended by a cut, or by its sender, is no error of the
		// test's.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	ln, err := net.Listen("tcp", listen.Host)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			from := ""
			if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
				from = strings.TrimPrefix(req.TLS.PeerCertificates[0].Subject.CommonName, groupCertPrefix)
			}
			cut, changed, known := l.state(from, to)
			if cut {
				// A partition loses what crosses it: the sender waits
				// until it gives up, or the link is back.
				select {
				case <-req.Context().Done():
				case <-changed:
					http.Error(w, "the link was cut while this request waited", http.StatusServiceUnavailable)
				}
				return
			}
			ctx, cancel := context.WithCancel(req.Context())
			defer cancel()
			if known {
				// Ends with the request (cancel above).
				go func() {
					select {
					case <-changed:
						cancel()
					case <-ctx.Done():
					}
				}()
			}
			rp.ServeHTTP(w, req.WithContext(ctx))
		}),
		// Handshakes that members give up while a link is cut, or while
		// a member restarts, are no news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "group link to %s: %v\n", to, err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		upstream.CloseIdleConnections()
	})
}
