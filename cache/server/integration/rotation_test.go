package integration_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/pki"
	"github.com/kcp-cache/kcp-cache/cache/server/reload"
)

// rotationDeadline bounds how long a rotated file may take to be in
// force: the serving certificate and the client CA are watched (fsnotify),
// the token file and the peers' kubeconfigs polled every reload.Interval.
const rotationDeadline = 5*reload.Interval + 10*time.Second

// The token file, the client CA and the serving certificate (last: the
// admin configuration trusts only the first) are each replaced while a client keeps listing over new TLS connections with a
// token that every version of the token file holds, and every one of its
// requests succeeds: the new files are in force without a restart.
func TestServingCertificateClientCAAndTokenFileRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	servingCAs := [2]*pki.CA{newCA(t, "serving-1"), newCA(t, "serving-2")}
	clientCAs := [2]*pki.CA{newCA(t, "clients-1"), newCA(t, "clients-2")}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	caFile, tokenFile := filepath.Join(dir, "client-ca.crt"), filepath.Join(dir, "tokens.csv")
	firstSerial := issueServing(t, servingCAs[0], certFile, keyFile)
	replaceFile(t, caFile, clientCAs[0].CertPEM)
	readers := fmt.Sprintf("%q", kcpcache.ReadersGroup)
	replaceFile(t, tokenFile, []byte("kept-token,kept,kept,"+readers+"\nold-token,old,old,"+readers+"\n"))
	srv := cachetest.StartServer(t, cachetest.WithFlags(func(o *options.Options) {
		o.SecureServing.ServerCert.CertKey = genericoptions.CertKey{CertFile: certFile, KeyFile: keyFile}
		o.Authentication.ClientCert.ClientCA = caFile
		o.Authentication.TokenAuthFile = tokenFile
	}))
	ctx := testContext(t)

	// A client that trusts both serving CAs, with a token or a reader's
	// certificate of a client CA.
	trustBoth := rest.AnonymousClientConfig(srv.Config())
	trustBoth.CAData = append(append([]byte(nil), servingCAs[0].CertPEM...), servingCAs[1].CertPEM...)
	withToken := func(token string) *rest.Config {
		c := rest.CopyConfig(trustBoth)
		c.BearerToken = token
		return c
	}
	withCert := func(ca *pki.CA, user string) *rest.Config {
		c := rest.CopyConfig(trustBoth)
		var err error
		if c.CertData, c.KeyData, err = ca.IssueClient(user, []string{kcpcache.ReadersGroup}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	list := scopedPath("*", "*", exportsPath)
	traffic := startTraffic(t, withToken("kept-token"), list)

	t.Run("client CA", func(t *testing.T) {
		before, after := withCert(clientCAs[0], "alice"), withCert(clientCAs[1], "bob")
		if err := expectStatus(ctx, before, list, http.StatusOK); err != nil {
			t.Fatalf("a certificate of the first client CA: %v", err)
		}
		written := time.Now()
		replaceFile(t, caFile, clientCAs[1].CertPEM)
		cachetest.EventuallyWithin(t, "the new client CA's certificate is accepted and the old one's refused", rotationDeadline, func(ctx context.Context) error {
			if err := expectStatus(ctx, after, list, http.StatusOK); err != nil {
				return fmt.Errorf("new CA's certificate: %w", err)
			}
			return expectStatus(ctx, before, list, http.StatusUnauthorized)
		})
		t.Logf("the new client CA was in force %s after its file was written", time.Since(written).Round(time.Millisecond))
	})

	t.Run("token file", func(t *testing.T) {
		if err := expectStatus(ctx, withToken("old-token"), list, http.StatusOK); err != nil {
			t.Fatalf("old-token before the rotation: %v", err)
		}
		written := time.Now()
		replaceFile(t, tokenFile, []byte("kept-token,kept,kept,"+readers+"\nnew-token,new,new,"+readers+"\n"))
		cachetest.EventuallyWithin(t, "the new token is accepted and the removed one refused", rotationDeadline, func(ctx context.Context) error {
			if err := expectStatus(ctx, withToken("new-token"), list, http.StatusOK); err != nil {
				return fmt.Errorf("new-token: %w", err)
			}
			return expectStatus(ctx, withToken("old-token"), list, http.StatusUnauthorized)
		})
		t.Logf("the new token file was in force %s after it was written", time.Since(written).Round(time.Millisecond))

		// A token file that does not parse keeps the tokens in force. (The
		// counter is the process's: other tests' servers load token files
		// too, but none that fails.)
		source := `source="` + authentication.TokenFileSource + `"`
		failed := metricSum(t, srv, "kcp_cache_file_reloads_total", source, `result="error"`)
		replaceFile(t, tokenFile, []byte("broken-token,only-two-columns\n"))
		cachetest.EventuallyWithin(t, "the broken file is counted", rotationDeadline, func(context.Context) error {
			if v := metricSum(t, srv, "kcp_cache_file_reloads_total", source, `result="error"`); v <= failed {
				return fmt.Errorf("kcp_cache_file_reloads_total{result=\"error\"} is %v", v)
			}
			return nil
		})
		if err := expectStatus(ctx, withToken("new-token"), list, http.StatusOK); err != nil {
			t.Errorf("new-token once the file is broken: %v", err)
		}
	})

	t.Run("serving certificate", func(t *testing.T) {
		if got := servedSerial(t, trustBoth); got.Cmp(firstSerial) != 0 {
			t.Fatalf("the server presents serial %x, want the first certificate's %x", got, firstSerial)
		}
		written := time.Now()
		secondSerial := issueServing(t, servingCAs[1], certFile, keyFile)
		cachetest.EventuallyWithin(t, "new TLS connections present the new certificate", rotationDeadline, func(context.Context) error {
			if got := servedSerial(t, trustBoth); got.Cmp(secondSerial) != 0 {
				return fmt.Errorf("serial %x, want %x", got, secondSerial)
			}
			return nil
		})
		t.Logf("the new serving certificate was presented %s after its files were written", time.Since(written).Round(time.Millisecond))
		onlyFirst := rest.CopyConfig(trustBoth)
		onlyFirst.CAData = servingCAs[0].CertPEM
		if err := expectStatus(ctx, onlyFirst, "/readyz", http.StatusOK); err == nil {
			t.Error("a client that trusts only the first serving CA still connects")
		}
	})

	ok, failures := traffic()
	if ok == 0 {
		t.Fatal("the client under traffic sent no request")
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests under traffic failed during the rotations; first: %s", len(failures), ok+len(failures), failures[0])
	}
	t.Logf("%d requests under traffic, over a new TLS connection each, all answered 200", ok)
}

// A mounted cache has no listener of its own, so upstream's serving does
// not run its client CA's controller: the cache's own loops do, and a
// certificate of the new CA is accepted, one of the old refused.
func TestMountedCacheClientCARotates(t *testing.T) {
	t.Parallel()
	cas := [2]*pki.CA{newCA(t, "mounted-clients-1"), newCA(t, "mounted-clients-2")}
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	replaceFile(t, caFile, cas[0].CertPEM)
	srv := cachetest.StartServer(t, cachetest.Mounted(cachetest.DefaultHostShard), cachetest.WithFlags(func(o *options.Options) {
		o.Authentication.ClientCert.ClientCA = caFile
	}))
	withCert := func(ca *pki.CA, user string) *rest.Config {
		c := srv.AnonymousConfig()
		var err error
		if c.CertData, c.KeyData, err = ca.IssueClient(user, []string{kcpcache.ReadersGroup}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	before, after := withCert(cas[0], "alice"), withCert(cas[1], "bob")
	list := scopedPath("*", "*", exportsPath)
	if err := expectStatus(testContext(t), before, list, http.StatusOK); err != nil {
		t.Fatalf("a certificate of the first client CA: %v", err)
	}
	replaceFile(t, caFile, cas[1].CertPEM)
	cachetest.EventuallyWithin(t, "the new client CA's certificate is accepted and the old one's refused", rotationDeadline, func(ctx context.Context) error {
		if err := expectStatus(ctx, after, list, http.StatusOK); err != nil {
			return fmt.Errorf("new CA's certificate: %w", err)
		}
		return expectStatus(ctx, before, list, http.StatusUnauthorized)
	})
}

// A cache's kubeconfig for a peer gets a new token, and the peer's token
// file drops the old one, in the order an operator follows: the peer
// accepts both tokens, the kubeconfig is rewritten, the cache reports the
// reload (kcp_cache_file_reloads_total), the old token is removed. The
// cache keeps confirming consistent reads with the peer meanwhile (each
// asks the peer with the cache's credentials), and a write at the peer
// afterwards reaches the cache's mirror.
func TestPeerKubeconfigRotation(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	regions := cachetest.StartRegions(t, ctx, cachetest.RegionsOptions{}, "east", "west")
	east, west := regions["east"], regions["west"]
	partition := kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: "shard-west", Cluster: "root"})
	atWest := cachetest.Dynamic(t, west.Srv.ShardConfig(t, "shard-west"), partition)
	atEast := cachetest.Dynamic(t, east.Srv.Config(), partition)
	if _, err := atWest.Resource(apiExports).Create(ctx, apiExport("before", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "east mirrors west's object", func(ctx context.Context) error {
		_, err := atEast.Resource(apiExports).Get(ctx, "before", metav1.GetOptions{ResourceVersion: "0"})
		return err
	})

	// Traffic: consistent reads of the mirrored object at east, each
	// confirmed with west.
	var (
		mu        sync.Mutex
		reads     int
		failures  []string
		trafficWG sync.WaitGroup
	)
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	trafficWG.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_, err := atEast.Resource(apiExports).Get(trafficCtx, "before", metav1.GetOptions{})
			mu.Lock()
			if trafficCtx.Err() != nil {
				mu.Unlock()
				return
			}
			reads++
			if err != nil {
				failures = append(failures, err.Error())
			}
			mu.Unlock()
			select {
			case <-trafficCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	oldLine := strings.Join([]string{cachetest.PeerToken("east", "west"), kcpcache.PeerUser("east"), "east"}, ",")
	newLine := strings.Join([]string{"rotated-east-reads-west", kcpcache.PeerUser("east"), "east"}, ",")
	asEast := func(token string) *rest.Config {
		c := rest.AnonymousClientConfig(west.Srv.Config())
		c.BearerToken = token
		return c
	}
	started := time.Now()
	replaceFile(t, west.TokenFile, []byte(oldLine+"\n"+newLine+"\n"))
	cachetest.EventuallyWithin(t, "west accepts the new token", rotationDeadline, func(ctx context.Context) error {
		return expectStatus(ctx, asEast("rotated-east-reads-west"), kcpcache.HomesPath, http.StatusOK)
	})
	file := east.PeerKubeconfigs["west"]
	kc, err := clientcmd.LoadFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Token = "rotated-east-reads-west"
	}
	raw, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	reloaded := metricSum(t, east.Srv, "kcp_cache_file_reloads_total", `source="`+server.PeerKubeconfigSource("west")+`"`, `result="success"`)
	replaceFile(t, file, raw)
	cachetest.EventuallyWithin(t, "east reloads its kubeconfig for west", rotationDeadline, func(context.Context) error {
		if v := metricSum(t, east.Srv, "kcp_cache_file_reloads_total", `source="`+server.PeerKubeconfigSource("west")+`"`, `result="success"`); v <= reloaded {
			return fmt.Errorf("kcp_cache_file_reloads_total is %v", v)
		}
		return nil
	})
	replaceFile(t, west.TokenFile, []byte(newLine+"\n"))
	cachetest.EventuallyWithin(t, "west refuses the old token", rotationDeadline, func(ctx context.Context) error {
		return expectStatus(ctx, asEast(cachetest.PeerToken("east", "west")), kcpcache.HomesPath, http.StatusUnauthorized)
	})
	t.Logf("rotated in %s", time.Since(started).Round(time.Millisecond))

	// East reaches west with the new token only: a consistent read is
	// confirmed with west, and a new write is mirrored.
	if _, err := atEast.Resource(apiExports).Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("a consistent read at east once west refuses the old token: %v", err)
	}
	if _, err := atWest.Resource(apiExports).Create(ctx, apiExport("after", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cachetest.Eventually(t, "east mirrors west's write made after the rotation", func(ctx context.Context) error {
		_, err := atEast.Resource(apiExports).Get(ctx, "after", metav1.GetOptions{})
		return err
	})

	stopTraffic()
	trafficWG.Wait()
	if reads == 0 {
		t.Fatal("no consistent read was made during the rotation")
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d consistent reads at east failed during the rotation; first: %s", len(failures), reads, failures[0])
	}
	t.Logf("%d consistent reads at east during the rotation, all answered", reads)
}

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// replaceFile replaces path with data as a rotation should: a complete
// file renamed over the old one.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// issueServing writes a new serving certificate of ca for loopback, with a
// new key, and returns its serial number.
func issueServing(t *testing.T, ca *pki.CA, certFile, keyFile string) *big.Int {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueServing("kcp-cache", []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, certFile, certPEM)
	replaceFile(t, keyFile, keyPEM)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.SerialNumber
}

// servedSerial opens a new TLS connection to the server cfg reaches,
// trusting cfg's CA data, and returns the serial number of the certificate
// it presents.
func servedSerial(t *testing.T, cfg *rest.Config) *big.Int {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("no CA in the configuration")
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// startTraffic lists path with cfg's CA data and bearer token over a new
// TLS connection each time until the function it returns is called, which
// reports how many requests answered 200 and what the others got.
func startTraffic(t *testing.T, cfg *rest.Config, path string) func() (int, []string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		ok       int
		failures []string
	)
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
			if err != nil {
				failures = append(failures, err.Error())
				return
			}
			req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
			resp, err := client.Do(req)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				failures = append(failures, err.Error())
			case resp.StatusCode != http.StatusOK:
				failures = append(failures, resp.Status)
			default:
				ok++
			}
			if resp != nil {
				_ = resp.Body.Close()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	stopped := false
	stop := func() (int, []string) {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
		return ok, failures
	}
	t.Cleanup(func() { stop() })
	return stop
}
