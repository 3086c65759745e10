package integration_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// askRevision GETs the revision path with query as cfg's identity and
// returns the status code and the body.
func askRevision(t *testing.T, cfg *rest.Config, query string) (int, []byte) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, cfg.Host+kcpcache.RevisionPath+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// revisionAnswer asks as cfg and wants a HomeRevisionAnswer.
func revisionAnswer(t *testing.T, cfg *rest.Config, query string) kcpcache.HomeRevisionAnswer {
	t.Helper()
	code, body := askRevision(t, cfg, query)
	var answer kcpcache.HomeRevisionAnswer
	if code != http.StatusOK {
		t.Fatalf("GET %s?%s: %d %s", kcpcache.RevisionPath, query, code, body)
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatalf("GET %s?%s: %s is not an answer: %v", kcpcache.RevisionPath, query, body, err)
	}
	return answer
}

// createExport creates an APIExport as shard in its partition and returns
// its resourceVersion.
func createExport(t *testing.T, srv *cachetest.Server, shard, name string) int64 {
	t.Helper()
	cfg := srv.ShardConfig(t, shard)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, cfg.Host+scopedPath(shard, "root", exportsPath), strings.NewReader(exportBody(name)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created metav1.PartialObjectMetadata
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating %s as shard %s: %d, %v", name, shard, resp.StatusCode, err)
	}
	rv, err := strconv.ParseInt(created.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

// A home answers, at the revision path, a revision that covers every write
// it acknowledged: a reader asking right after a shard's write gets at least
// the object's resourceVersion for that shard and resource, the cache's
// epoch, and the floor for a type no shard wrote. Peers may ask; the
// anonymous may not; bad parameters are a 400 Status.
func TestRevisionPathCoversAcknowledgedWrites(t *testing.T) {
	srv := cachetest.StartServer(t)
	reader := srv.UserConfig(t, "dashboard", kcpcache.ReadersGroup)
	const exports = "shard=amber&resource=apiexports.apis.kcp.io"

	// Ready once it answers at all (the tracker starts with the server).
	cachetest.Eventually(t, "the revision path answers", func(context.Context) error {
		if code, body := askRevision(t, reader, exports); code != http.StatusOK {
			return errorf("%d %s", code, body)
		}
		return nil
	})

	for i, name := range []string{"first", "second"} {
		rv := createExport(t, srv, "amber", name)
		// At once: the barrier, not polling, makes the answer cover the write.
		answer := revisionAnswer(t, reader, exports)
		if answer.Revision < rv {
			t.Errorf("write %d at %d: amber's apiexports answered %d", i, rv, answer.Revision)
		}
		if answer.Epoch != srv.Server().Epoch() || answer.Cache != "" {
			t.Errorf("answer names cache %q epoch %q, want the unnamed cache in epoch %q", answer.Cache, answer.Epoch, srv.Server().Epoch())
		}
		if anyShard := revisionAnswer(t, reader, "shard=*&resource=apiexports.apis.kcp.io"); anyShard.Revision < rv {
			t.Errorf("write %d at %d: apiexports of any shard answered %d", i, rv, anyShard.Revision)
		}
	}
	// Nothing of this type anywhere: the answer is the tracker's floor,
	// the same for any shard, and no write moves it.
	floor := revisionAnswer(t, reader, "shard=amber&resource=apiresourceschemas.apis.kcp.io")
	createExport(t, srv, "amber", "third")
	for _, shard := range []string{"amber", "blue", "*"} {
		if got := revisionAnswer(t, reader, "shard="+shard+"&resource=apiresourceschemas.apis.kcp.io"); got.Revision != floor.Revision || got.Revision <= 0 {
			t.Errorf("apiresourceschemas of %s: %d, want the floor %d", shard, got.Revision, floor.Revision)
		}
	}

	// Who may ask.
	if answer := revisionAnswer(t, srv.UserConfig(t, kcpcache.PeerUser("west")), exports); answer.Revision <= 0 {
		t.Errorf("a peer's answer: %+v", answer)
	}
	revisionAnswer(t, srv.ShardConfig(t, "blue"), exports)
	if code, body := askRevision(t, srv.AnonymousConfig(), exports); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("anonymous: %d %s, want 401 or 403", code, body)
	}
	if code, body := askRevision(t, srv.UserConfig(t, "someone"), exports); code != http.StatusForbidden {
		t.Errorf("a user of no group: %d %s, want 403", code, body)
	}
	// A peer reads and never writes.
	peer := srv.UserConfig(t, kcpcache.PeerUser("west"))
	if code, status := call(t, peer, "POST", scopedPath("amber", "root", exportsPath), exportBody("by-peer")); code != http.StatusForbidden || !strings.Contains(status.Message, string(authorization.RulePeerReadOnly)) {
		t.Errorf("a peer writing: %d %s, want 403 by rule %s", code, status.Message, authorization.RulePeerReadOnly)
	}
	if code, status := call(t, peer, "GET", scopedPath("*", "*", exportsPath), ""); code != http.StatusOK {
		t.Errorf("a peer listing */*: %d %s", code, status.Message)
	}

	for _, query := range []string{"shard=amber", "resource=apiexports.apis.kcp.io", "shard=Amber!&resource=apiexports.apis.kcp.io", "shard=amber&resource=api/exports"} {
		code, body := askRevision(t, reader, query)
		var status metav1.Status
		if err := json.Unmarshal(body, &status); err != nil || code != http.StatusBadRequest || status.Reason != metav1.StatusReasonBadRequest {
			t.Errorf("?%s: %d %s, want a 400 Status with reason BadRequest", query, code, body)
		}
	}
}
