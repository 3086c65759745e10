package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// restClient is a client-go REST client through t, configured as the
// loopback client is (a bearer token, TLS options that inProcessConfig
// must drop).
func restClient(t *testing.T, tr *inProcess) rest.Interface {
	t.Helper()
	loopback := &rest.Config{
		Host:            "https://127.0.0.1:6443",
		BearerToken:     "loopback-token",
		TLSClientConfig: rest.TLSClientConfig{ServerName: "loopback", CAData: []byte("not used in-process")},
	}
	c := inProcessConfig(loopback, tr)
	c.APIPath = "/"
	c.GroupVersion = &schema.GroupVersion{Version: "v1"}
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestInProcessServesWithTheHandlerAsNetHTTPWould(t *testing.T) {
	tr := &inProcess{}
	rc := restClient(t, tr)
	ctx := context.Background()

	if err := rc.Post().AbsPath("/x").Body([]byte("{}")).Do(ctx).Error(); !errors.Is(err, errNotServing) {
		t.Fatalf("before the handler is set: got %v, want %v", err, errNotServing)
	}

	var seen *http.Request
	var seenBody string
	tr.serve(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		seen = req
		b, _ := io.ReadAll(req.Body)
		seenBody = string(b)
		if req.URL.Path == "/refused" {
			w.Header().Set("Content-Type", runtime.ContentTypeJSON)
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409,"message":"exists"}`)
			return
		}
		w.Header().Set("X-Answer", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))

	res := rc.Post().AbsPath("/services/cache/shards/s/clusters/c/api/v1/configmaps").Param("dryRun", "All").
		SetHeader("Content-Type", runtime.ContentTypeJSON).Body([]byte(`{"a":1}`)).Do(ctx)
	if err := res.Error(); err != nil {
		t.Fatal(err)
	}
	var code int
	res.StatusCode(&code)
	if code != http.StatusCreated {
		t.Errorf("status %d, want %d", code, http.StatusCreated)
	}
	if got, want := seen.RequestURI, "/services/cache/shards/s/clusters/c/api/v1/configmaps?dryRun=All"; got != want {
		t.Errorf("RequestURI %q, want %q", got, want)
	}
	if seen.Host != "127.0.0.1:6443" || seen.RemoteAddr == "" || seen.ProtoMajor != 2 || seen.TLS != nil {
		t.Errorf("request as served: host %q, remote %q, proto %d, TLS %v", seen.Host, seen.RemoteAddr, seen.ProtoMajor, seen.TLS)
	}
	if got := seen.Header.Get("Authorization"); got != "Bearer loopback-token" {
		t.Errorf("Authorization %q: the loopback token must be sent", got)
	}
	if seenBody != `{"a":1}` {
		t.Errorf("body %q", seenBody)
	}

	err := rc.Post().AbsPath("/refused").SetHeader("Content-Type", runtime.ContentTypeJSON).Body([]byte(`{}`)).Do(ctx).Error()
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("a refused write: got %v, want the handler's AlreadyExists Status", err)
	}
}

func TestInProcessAbortedAnswerIsAnError(t *testing.T) {
	tr := &inProcess{}
	rc := restClient(t, tr)
	tr.serve(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	err := rc.Get().AbsPath("/aborted").Do(context.Background()).Error()
	if err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("got %v, want an error naming the abort", err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 && status.Status().Status == metav1.StatusSuccess {
		t.Fatalf("an aborted answer read as a success: %v", err)
	}
}
