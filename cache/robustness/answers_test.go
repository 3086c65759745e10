package robustness

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The clients' 5xx answers are counted by status and reason, a 500 fails
// the run, and a write answered 503 with Retry-After reaches the history
// at its first answer: client-go does not retry it.
func TestServerErrorsAreCountedAndA500Fails(t *testing.T) {
	var creates atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == http.MethodPost:
			creates.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503,"message":"etcd did not confirm the create"}`))
		case strings.HasSuffix(req.URL.Path, "/broken"):
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500,"message":"etcdserver: something new"}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	answers := &Answers{}
	d, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL, WrapTransport: answers.Wrap})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Resource(Resource)
	ctx := context.Background()
	if _, err := c.Create(ctx, object("k0", "v", 0), metav1.CreateOptions{}); err == nil {
		t.Fatal("the create succeeded")
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("the create was sent %d times, want once (not retried after its 503)", n)
	}
	_, _ = c.Get(ctx, "broken", metav1.GetOptions{})
	_, _ = c.Get(ctx, "behind-a-proxy", metav1.GetOptions{})

	rep := Check(History{ServerErrors: answers.take()}, time.Minute)
	want := "500 InternalError: 1, 502 (no Status): 1, 503 ServiceUnavailable: 1"
	if got := formatCounts(rep.ServerErrors); got != want {
		t.Errorf("5xx answers counted as %q, want %q", got, want)
	}
	if len(rep.Violations) != 1 || rep.Violations[0].Check != "internal-error" || !strings.Contains(rep.Violations[0].Details, "etcdserver: something new") {
		t.Errorf("violations %v, want the 500 alone as internal-error", rep.Violations)
	}
}
