package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
)

// The wire's limit: how fast this machine moves a LIST's bytes through TLS
// over loopback, against which the LIST's body throughput is measured; and
// what a client-go reader gains from a format that decodes faster (CBOR).

// tlsLoopback is a TLS server and a connected client on 127.0.0.1, with the
// protocol version and cipher suite the cache negotiated. The server
// answers each request (8 bytes: a length) with that many bytes of payload.
type tlsLoopback struct {
	client  *tls.Conn
	payload []byte
	done    chan error
	suite   string
}

// newTLSLoopback connects a TLS client to a TLS server on 127.0.0.1 with
// the given version and cipher suite (Go's crypto/tls on both ends, as the
// cache and client-go are); payload is what the server writes, repeated.
func newTLSLoopback(ctx context.Context, version, suite uint16, payload []byte) (*tlsLoopback, error) {
	ca, err := pki.NewCA("bench-loopback")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := ca.IssueServing("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: version, MaxVersion: version}
	if version < tls.VersionTLS13 {
		cfg.CipherSuites = []uint16{suite} // TLS 1.3's suites are not configurable in Go
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		return nil, err
	}
	lb := &tlsLoopback{payload: payload, done: make(chan error, 1)}
	go func() {
		defer l.Close()
		conn, err := l.Accept()
		if err != nil {
			lb.done <- err
			return
		}
		defer conn.Close()
		lb.done <- lb.serve(conn)
	}()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: version, MaxVersion: version, CipherSuites: cfg.CipherSuites}} //nolint:gosec // a loopback measurement of bulk throughput
	conn, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	lb.client = conn.(*tls.Conn)
	if err := lb.client.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	st := lb.client.ConnectionState()
	if st.CipherSuite != suite || st.Version != version {
		_ = conn.Close()
		return nil, fmt.Errorf("the loopback baseline negotiated %s %s, the cache %s %s",
			tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), tls.VersionName(version), tls.CipherSuiteName(suite))
	}
	lb.suite = tls.VersionName(st.Version) + " " + tls.CipherSuiteName(st.CipherSuite)
	return lb, nil
}

// serve writes the payload, in writes of 32 KiB as the cache's LIST
// encoder does, for each request.
func (lb *tlsLoopback) serve(conn net.Conn) error {
	var req [8]byte
	for {
		if _, err := io.ReadFull(conn, req[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		for left := int(binary.BigEndian.Uint64(req[:])); left > 0; {
			chunk := min(left, 32<<10, len(lb.payload))
			if _, err := conn.Write(lb.payload[:chunk]); err != nil {
				return err
			}
			left -= chunk
		}
	}
}

// transfer has the server send n bytes and reads them all.
func (lb *tlsLoopback) transfer(n int) error {
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], uint64(n))
	if _, err := lb.client.Write(req[:]); err != nil {
		return err
	}
	got, err := io.CopyN(io.Discard, lb.client, int64(n))
	if err != nil {
		return fmt.Errorf("loopback TLS: read %d of %d bytes: %w", got, n, err)
	}
	return nil
}

func (lb *tlsLoopback) close() error {
	_ = lb.client.Close()
	return <-lb.done
}

// cacheTLS is the TLS version and cipher suite of the bench's connection to
// the cache, and the uncompressed body of url.
func (b *bench) cacheTLS(ctx context.Context, url string) (version, suite uint16, body []byte, err error) {
	req, err := newGet(ctx, url)
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.noGzipClient.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	if resp.TLS == nil {
		return 0, 0, nil, fmt.Errorf("the cache answered without TLS")
	}
	return resp.TLS.Version, resp.TLS.CipherSuite, body, nil
}

// servesCBOR asks the cache for a one-object LIST in CBOR: 200 when it
// serves CBOR (--feature-gates=CBORServingAndStorage=true), 406 when not.
func (b *bench) servesCBOR(ctx context.Context, url string) (bool, error) {
	req, err := newGet(ctx, url+"?limit=1")
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/cbor")
	resp, err := b.httpClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotAcceptable:
		return false, nil
	}
	return false, fmt.Errorf("a LIST with Accept: application/cbor: %s", resp.Status)
}

// cborResource is a dynamic client of apiexports in every partition that
// asks for CBOR, as client-go does with its feature gate ClientsAllowCBOR
// (KUBE_FEATURE_ClientsAllowCBOR=true). The gate is on only while the
// client is built: client-go reads it then (and the negotiated Accept
// header stays with the client), so every other client of the bench keeps
// reading JSON.
func (b *bench) cborResource() (dynamic.ResourceInterface, error) {
	gates, ok := clientfeatures.FeatureGates().(interface {
		Set(clientfeatures.Feature, bool) error
	})
	if !ok {
		return nil, fmt.Errorf("client-go's feature gates (%T) cannot be set", clientfeatures.FeatureGates())
	}
	was := clientfeatures.FeatureGates().Enabled(clientfeatures.ClientsAllowCBOR)
	if err := gates.Set(clientfeatures.ClientsAllowCBOR, true); err != nil {
		return nil, err
	}
	defer func() { _ = gates.Set(clientfeatures.ClientsAllowCBOR, was) }()
	cfg := rest.CopyConfig(b.srv.admin)
	cfg.Host = kcpcache.JoinHostPath(cfg.Host, kcpcache.ScopedPathPrefix(everything))
	h, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, h)
	if err != nil {
		return nil, err
	}
	return dc.Resource(apiExports), nil
}

// readBodyAs is readBody with the given Accept header.
func (b *bench) readBodyAs(ctx context.Context, h *http.Client, url, accept string) (int, error) {
	req, err := newGet(ctx, url)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", accept)
	resp, err := h.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return int(n), nil
}

// mbPerSecond is n bytes in d, in MB (10^6 bytes) per second.
func mbPerSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

// wireRows adds the rows of the wire's limit (3d) and of the faster format
// (3e) at the data set's full size n.
func (b *bench) wireRows(lr listResult, n int) {
	listRate, wireRate := mbPerSecond(lr.bodyBytesNoGzip, lr.bodyNoGzip.P50), mbPerSecond(lr.wireBytes, lr.wire.P50)
	b.rep.add(&row{
		ID: "3d", Metric: fmt.Sprintf("  same LIST's body throughput, no gzip (%d objects)", n),
		Cache:      fmt.Sprintf("%.0f MB/s", listRate),
		Baseline:   fmt.Sprintf("%.0f MB/s loopback TLS, same bytes", wireRate),
		CacheValue: listRate, BaselineValue: wireRate, Unit: "MB/s",
		Ratio: ratio(listRate, wireRate),
		RatioMeaning: fmt.Sprintf("the body of the */* LIST without gzip (%.1f MB of JSON, p50 %s, CPU %s) ÷ the same number of bytes written by a Go TLS server to a Go TLS client over one warm 127.0.0.1 connection (%s as the cache negotiated, 32 KiB writes; p50 %s, CPU %s), the physical limit of this machine; with gzip (client-go's default) the body takes %s",
			float64(lr.bodyBytesNoGzip)/1e6, ms(lr.bodyNoGzip.P50), ms(lr.bodyNoGzipCPU.Mean), lr.wireSuite, ms(lr.wire.P50), ms(lr.wireCPU.Mean), ms(lr.body.P50)),
		Details: map[string]interface{}{"wire": lr.wire, "wire_cpu": lr.wireCPU, "wire_bytes": lr.wireBytes, "wire_suite": lr.wireSuite},
	})
	if !lr.cborServed {
		b.rep.add(&row{
			ID: "3e", Metric: fmt.Sprintf("*/* consistent LIST, %d objects, client-go asking for CBOR (p50)", n),
			Cache: "not served", Baseline: ms(lr.cache.P50) + " JSON (3b)", Ratio: math.NaN(),
			Note: "the cache serves CBOR with -server-flag=--feature-gates=CBORServingAndStorage=true",
		})
		return
	}
	b.rep.add(&row{
		ID: "3e", Metric: fmt.Sprintf("*/* consistent LIST, %d objects, client-go asking for CBOR (p50)", n),
		Cache: ms(lr.cborList.P50), Baseline: ms(lr.cache.P50) + " JSON (3b)",
		CacheValue: lr.cborList.P50.Seconds(), BaselineValue: lr.cache.P50.Seconds(), Unit: "s",
		Ratio: ratio(float64(lr.cborList.P50), float64(lr.cache.P50)),
		RatioMeaning: fmt.Sprintf("dynamic-client LIST with ClientsAllowCBOR (Accept: application/cbor, decoding included) ÷ the same LIST in JSON; p99 %s vs %s; process CPU per LIST %s vs %s; the CBOR body alone, no gzip: %.1f MB in %s (CPU %s), against %.1f MB of JSON in %s",
			ms(lr.cborList.P99), ms(lr.cache.P99), ms(lr.cborListCPU.Mean), ms(lr.cacheCPU.Mean),
			float64(lr.cborBodyBytes)/1e6, ms(lr.cborBody.P50), ms(lr.cborBodyCPU.Mean), float64(lr.bodyBytesNoGzip)/1e6, ms(lr.bodyNoGzip.P50)),
		Details: map[string]interface{}{"cbor_list": lr.cborList, "cbor_list_cpu": lr.cborListCPU, "cbor_body": lr.cborBody, "cbor_body_cpu": lr.cborBodyCPU, "cbor_body_bytes": lr.cborBodyBytes},
	})
}
