package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// inProcess is an http.RoundTripper that serves a client's request with the
// server's own handler chain, in the calling goroutine, without a
// connection: the request passes every filter (authentication by the
// loopback token, authorization, admission, the guards) and the data plane
// exactly as it would over loopback, and only the TLS and HTTP/2 framing of
// both ends is left out. The mirror's writes of copies use it: in a first
// copy of 250,000 objects, the transport was a seventh of the mirror's CPU
// (the HTTP/2 server's connection loop, the client's, TLS, system calls).
//
// Upstream has no in-process loopback (k8s.io/apiserver's
// LoopbackClientConfig dials the server's own listener); this relies only
// on http.Handler, as net/http's server calls it.
//
// Answers are buffered whole: it is for requests with short answers
// (creates and updates), never for watches or large lists.
type inProcess struct {
	// handler is the server's full handler chain, set once the API server
	// is built (the mirror's client is built before it); until then
	// requests fail as a dial would.
	handler atomic.Pointer[http.Handler]
}

// errNotServing is what a request gets before the handler is set.
var errNotServing = errors.New("the cache server's handler is not built yet")

func (t *inProcess) serve(h http.Handler) { t.handler.Store(&h) }

// RoundTrip serves req. A panic in the chain that net/http's server would
// have swallowed (http.ErrAbortHandler: the handler aborted the answer)
// ends the request with an error, as a reset stream would.
func (t *inProcess) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	h := t.handler.Load()
	if h == nil {
		return nil, errNotServing
	}
	in := req.Clone(req.Context())
	// What net/http's server sets on the requests it reads.
	in.RequestURI = req.URL.RequestURI()
	in.Host = req.URL.Host
	in.RemoteAddr = "127.0.0.1:0"
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/2.0", 2, 0
	if in.Body == nil {
		in.Body = http.NoBody
	}
	w := &bufferedAnswer{header: http.Header{}}
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, fmt.Errorf("the in-process request %s %s was aborted: %v", req.Method, req.URL.Path, r)
		}
	}()
	(*h).ServeHTTP(w, in)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	return &http.Response{
		Status:        strconv.Itoa(w.code) + " " + http.StatusText(w.code),
		StatusCode:    w.code,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        w.header,
		Body:          io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// bufferedAnswer is the http.ResponseWriter of one in-process request.
type bufferedAnswer struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *bufferedAnswer) Header() http.Header { return w.header }

func (w *bufferedAnswer) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *bufferedAnswer) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Flush is a no-op: the answer is read once the handler returns.
func (w *bufferedAnswer) Flush() {}

// inProcessConfig is loopback's client configuration (its bearer token, its
// identity) sent through t rather than over the listener.
func inProcessConfig(loopback *rest.Config, t *inProcess) *rest.Config {
	c := rest.CopyConfig(loopback)
	// client-go refuses a custom transport beside TLS options; no TLS is
	// spoken in-process.
	c.TLSClientConfig = rest.TLSClientConfig{}
	c.Transport = t
	return c
}
