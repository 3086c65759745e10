package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// startPoller lists bootstrapped types from the moment a server is built
// until stopped, counting answers by status and recording what answered 404.
type startPoller struct {
	mu       sync.Mutex
	codes    map[int]int
	notFound []string
	wg       sync.WaitGroup
	ctx      context.Context
	t        *testing.T
}

// The lists every starting server is asked for: what the cache's own
// heartbeat-metrics informer lists (every shard's heartbeats) and a kcp
// type, in a partition and through the wildcard.
var startingPaths = []string{
	kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: kcpcache.HeartbeatCluster}, "/apis/cache.kcp.io/v1alpha1/shardheartbeats"),
	kcpcache.ScopedPath(kcpcache.Scope{Shard: "amber", Cluster: "root"}, exportsPath),
	kcpcache.ScopedPath(kcpcache.Scope{Shard: "*", Cluster: "*"}, exportsPath),
}

func (p *startPoller) poll(cfg *rest.Config) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		p.t.Error(err)
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for p.ctx.Err() == nil {
			for _, path := range startingPaths {
				req, _ := http.NewRequestWithContext(p.ctx, http.MethodGet, cfg.Host+path, nil)
				req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
				resp, err := client.Do(req)
				if err != nil {
					continue // not listening yet, or stopped
				}
				resp.Body.Close()
				p.mu.Lock()
				p.codes[resp.StatusCode]++
				if resp.StatusCode == http.StatusNotFound {
					p.notFound = append(p.notFound, path)
				}
				p.mu.Unlock()
			}
		}
	}()
}

// check waits for a few answers of the ready server, then fails the test on
// any answer but 200 and the retryable 503 and 429.
func (p *startPoller) check(t *testing.T, what string) {
	t.Helper()
	p.mu.Lock()
	base := p.codes[http.StatusOK]
	p.mu.Unlock()
	cachetest.Eventually(t, "answers of the ready server", func(context.Context) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if n := p.codes[http.StatusOK] - base; n < 3*len(startingPaths) {
			return fmt.Errorf("%d answers of 200 so far", n)
		}
		return nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("%s: answers by status: %v", what, p.codes)
	for code, n := range p.codes {
		if code != http.StatusOK && code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
			t.Errorf("%s: %d answers with status %d", what, n, code)
		}
	}
	if len(p.notFound) > 0 {
		t.Errorf("%s: 404 for %v", what, p.notFound)
	}
	clear(p.codes)
	p.notFound = nil
}

// A bootstrapped type is served, or answered with a retryable 503, from the
// moment the server is built: never a 404, which client-go (and the
// server's own heartbeat-metrics informer) take for "no such type". Standalone
// and mounted in a host, at a first start on an empty etcd and at a restart.
func TestBootstrappedTypesAreNeverMissingWhileStarting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts []cachetest.Option
	}{
		{"standalone", nil},
		{"mounted", []cachetest.Option{cachetest.Mounted("amber")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, stop := context.WithCancel(testContext(t))
			p := &startPoller{codes: map[int]int{}, ctx: ctx, t: t}
			defer p.wg.Wait()
			defer stop()
			// Every request the server answers is audited, its own loopback
			// clients' (the heartbeat informer's) included.
			dir := t.TempDir()
			policy, auditLog := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.log")
			if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			audited := cachetest.WithFlags(func(o *options.Options) {
				o.Audit.PolicyFile = policy
				o.Audit.LogOptions.Path = auditLog
			})
			defer checkNo404sAudited(t, auditLog)
			srv := cachetest.StartServer(t, append(c.opts, audited, cachetest.WhileStarting(p.poll))...)
			p.check(t, "first start")

			srv.RestartServer(t)
			p.check(t, "restart")
		})
	}
}

// checkNo404sAudited fails the test for every request the audit log
// records as answered 404 but a get of an object (the server's CRD
// installer asks for CRDs it then creates): a list or watch answered 404
// took the type for absent, a path answered 404 was not the cache's.
func checkNo404sAudited(t *testing.T, auditLog string) {
	t.Helper()
	b, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Stage          string `json:"stage"`
			RequestURI     string `json:"requestURI"`
			Verb           string `json:"verb"`
			User           struct{ Username string }
			ObjectRef      *struct{ Resource string } `json:"objectRef"`
			ResponseStatus struct{ Code int }         `json:"responseStatus"`
			Annotations    map[string]string          `json:"annotations"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Stage != "ResponseComplete" || ev.ResponseStatus.Code != http.StatusNotFound || (ev.ObjectRef != nil && ev.Verb == "get") {
			continue
		}
		t.Errorf("%s %s (partition %q) by %s answered 404", ev.Verb, ev.RequestURI, ev.Annotations[authorization.AuditAnnotationPartition], ev.User.Username)
	}
}
