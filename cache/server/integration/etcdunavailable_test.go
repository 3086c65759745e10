package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// etcdAnswer is one answer of the cache while etcd members stop.
type etcdAnswer struct {
	verb       string
	code       int
	retryAfter string
	status     metav1.Status
}

// etcdCaused reports whether a is the cache's answer to an etcd that could
// not serve the request.
func (a etcdAnswer) etcdCaused() bool {
	if a.status.Details == nil {
		return false
	}
	for _, c := range a.status.Details.Causes {
		if c.Type == partition.CauseEtcdUnavailable {
			return true
		}
	}
	return false
}

// Creates and consistent reads in flight while etcd's leader is killed
// (as a crash: it hands nothing over) are answered as usual or 503 with
// Retry-After, never 500. A write in flight at the leader loses its
// connection; one that a follower forwarded to it is lost with it and
// times out in etcd; upstream answers both 500. The 503s that etcd caused
// name etcd and say that a write may have been stored. Once a new leader
// is elected, writes succeed again. Every request is sent once (client-go
// would retry a 503 with Retry-After by itself), so every answer is seen.
func TestWritesWhileTheEtcdLeaderDiesAnswer503NotInternalError(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (three etcd members, one killed): skipped with -short")
	}
	t.Parallel()
	cluster := cachetest.StartEtcdCluster(t, 3)
	srv := cachetest.StartServer(t, cachetest.WithFlags(cluster.Flags))
	ctx := testContext(t)

	cfg := srv.ScopedConfig("s", "root")
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	collection := strings.TrimSuffix(cfg.Host, "/") + "/apis/" + apiExports.Group + "/" + apiExports.Version + "/" + apiExports.Resource

	var mu sync.Mutex
	var answers []etcdAnswer
	send := func(verb, method, url string, body []byte) {
		req, err := newRequest(ctx, method, url, body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			// No answer (the test ending): nothing to check.
			return
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		a := etcdAnswer{verb: verb, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		if resp.StatusCode >= 300 {
			_ = json.Unmarshal(raw, &a.status)
		}
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
	}
	count := func(match func(etcdAnswer) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, a := range answers {
			if match(a) {
				n++
			}
		}
		return n
	}
	created := func(a etcdAnswer) bool { return a.code == http.StatusCreated }

	// Four writers, each creating objects of its own names one after
	// another, and a reader of a name no one creates.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	stopAll := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	defer stopAll()
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body, _ := json.Marshal(apiExport(fmt.Sprintf("export-%d-%d", w, i), nil).Object)
				send("create", http.MethodPost, collection, body)
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			send("get", http.MethodGet, collection+"/absent", nil)
		}
	})

	createdSince := func(what string, n int) {
		t.Helper()
		before := count(created)
		cachetest.Eventually(t, what, func(context.Context) error {
			if got := count(created) - before; got < n {
				return fmt.Errorf("%d creates succeeded, want %d", got, n)
			}
			return nil
		})
	}
	start := time.Now()
	createdSince("creates before the leader is killed", 10)
	leader, err := cluster.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: killing etcd member %d, the leader", time.Since(start).Round(time.Millisecond), leader)
	// Kill returns once the member has closed its listeners, which can
	// wait as long as etcd's request timeout (its open streams): by then,
	// writes a follower forwarded to the dead leader have timed out.
	cluster.Kill(leader)
	// Until a write in flight is answered for etcd; a 500 ends the wait
	// too, and fails below.
	cachetest.Eventually(t, "a write in flight answered for etcd", func(context.Context) error {
		if count(func(a etcdAnswer) bool {
			return a.verb == "create" && (a.etcdCaused() || a.code >= 500 && a.code != 503)
		}) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	t.Logf("%s: a write was answered for etcd", time.Since(start).Round(time.Millisecond))
	createdSince("creates with the new leader", 5)
	t.Logf("%s: creates succeed with the new leader", time.Since(start).Round(time.Millisecond))
	stopAll()

	byAnswer, etcdErrors := map[string]int{}, map[string]int{}
	for _, a := range answers {
		key := fmt.Sprintf("%s %d %s", a.verb, a.code, a.status.Reason)
		if a.etcdCaused() {
			key += " (etcd)"
		}
		byAnswer[key]++
		if a.etcdCaused() {
			etcdErrors[a.status.Details.Causes[0].Message]++
		}
		switch {
		case a.verb == "create" && a.code == http.StatusCreated, a.verb == "get" && a.code == http.StatusNotFound:
			continue
		case a.code != http.StatusServiceUnavailable:
			t.Errorf("a %s answered %d %s: %s; want success or 503", a.verb, a.code, a.status.Reason, a.status.Message)
			continue
		}
		if s, err := strconv.Atoi(a.retryAfter); err != nil || s < 1 || a.status.Reason != metav1.StatusReasonServiceUnavailable {
			t.Errorf("a %s answered 503 with Retry-After %q and reason %q (%s); want Retry-After and ServiceUnavailable", a.verb, a.retryAfter, a.status.Reason, a.status.Message)
		}
		if a.etcdCaused() && (!strings.Contains(a.status.Message, "etcd") ||
			(a.verb == "create") != strings.Contains(a.status.Message, "may or may not have been stored")) {
			t.Errorf("a %s answered 503 for etcd with the message %q: it must name etcd, and a write's must say it may have been stored", a.verb, a.status.Message)
		}
	}
	if count(func(a etcdAnswer) bool { return a.etcdCaused() }) == 0 {
		t.Errorf("no answer was a 503 for etcd: %v", byAnswer)
	}
	t.Logf("answers while etcd's leader was killed and another elected: %v; etcd's errors: %v", byAnswer, etcdErrors)
}
