package homes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
)

// Admit decides a write of shard s at east: accepted (claiming the shard
// when nobody knows a home), 403 naming the home, or 503 with a reason in
// its causes, one per peer (or the shard, for a conflict).
func TestAdmitWriteByTheClaims(t *testing.T) {
	const (
		s       = "s"
		ownedBy = `{"claims":[{"shard":"s","home":"%s","generation":%d}]}`
	)
	claim := func(home string, gen int64) []kcpcache.HomeClaim {
		return []kcpcache.HomeClaim{{Shard: s, Home: home, Generation: gen}}
	}
	tests := []struct {
		name string
		tableConfig
		// wantCode is the refusal's status, 0 when the write is accepted;
		// wantCauses its causes as "type field"; wantMessage a part of its
		// message.
		wantCode    int32
		wantCauses  []string
		wantMessage string
		// wantClaim is s's claim afterwards ("home/generation", "" for
		// none, "*/1" for either of two homes at generation 1), also as
		// persisted when wantPersisted.
		wantClaim     string
		wantPersisted bool
	}{
		{name: "no peers and no claim: this cache claims the shard",
			wantClaim: "east/1", wantPersisted: true},
		{name: "a claim held here",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"east","generation":2}]}`},
			wantClaim:   "east/2"},
		{name: "a claim held elsewhere: 403 naming the home and the generation",
			tableConfig: tableConfig{persisted: `{"claims":[{"shard":"s","home":"west","generation":3}]}`},
			wantCode:    http.StatusForbidden, wantMessage: `the home of shard "s" is the cache "west" (claim generation 3)`,
			wantClaim: "west/3"},
		{name: "every peer answers and none knows a home (a generation 0 is no claim): this cache claims it",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {}, "south": {claims: claim("south", 0)}}},
			wantClaim:   "east/1", wantPersisted: true},
		{name: "a peer knows the home: 403 naming it",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claims: claim("west", 1)}, "south": {}}},
			wantCode:    http.StatusForbidden, wantMessage: `the home of shard "s" is the cache "west" (claim generation 1)`,
			wantClaim: "west/1", wantPersisted: true},
		{name: "a peer names this cache the home: the claim is taken back",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claims: claim("east", 4)}}},
			wantClaim:   "east/4", wantPersisted: true},
		{name: "a peer does not answer in time: 503 HomeUnreachable naming it",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {}, "south": {hang: true}}, wait: 200 * time.Millisecond},
			wantCode:    http.StatusServiceUnavailable, wantCauses: []string{"HomeUnreachable south"},
			wantMessage: `this cache knows no home of shard "s" and cannot ask every cache (south did not answer): the shard may be homed there`},
		{name: "peers that fail or are down: one HomeUnreachable each",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {status: http.StatusInternalServerError}, "south": {down: true}}},
			wantCode:    http.StatusServiceUnavailable, wantCauses: []string{"HomeUnreachable south", "HomeUnreachable west"},
			wantMessage: `(south, west did not answer)`},
		{name: "a peer answering as another cache is not an answer",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {as: "north", claims: claim("north", 1)}}},
			wantCode:    http.StatusServiceUnavailable, wantCauses: []string{"HomeUnreachable west"},
			wantMessage: `(west did not answer)`},
		{name: "a peer is claiming the shard: 503 HomeClaiming naming it",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claiming: []string{s}}, "south": {claiming: []string{"other"}}}},
			wantCode:    http.StatusServiceUnavailable, wantCauses: []string{"HomeClaiming west"},
			wantMessage: `caches (west) are claiming shard "s" at this moment; retry`},
		{name: "a peer claiming another shard is no obstacle",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claiming: []string{"other"}}}},
			wantClaim:   "east/1", wantPersisted: true},
		{name: "two peers claim it at the same generation: 503 HomeConflict naming the shard",
			tableConfig: tableConfig{peers: map[string]peerSpec{"west": {claims: claim("west", 1)}, "south": {claims: claim("south", 1)}}},
			wantCode:    http.StatusServiceUnavailable, wantCauses: []string{"HomeConflict s"},
			wantMessage: `both claim shard "s" at generation 1; resolve with --adopt-shard=s at the cache that should be its home`,
			wantClaim:   "*/1"},
		{name: "the claim cannot be persisted: 503, and no claim",
			tableConfig: tableConfig{saveErr: errors.New("etcd is gone")},
			wantCode:    http.StatusServiceUnavailable, wantMessage: `persisting the claim of shard "s": etcd is gone`},
		{name: "the shard is being adopted and --adopt-shard has not acted: 503",
			tableConfig: tableConfig{adopt: []string{s}, wait: 100 * time.Millisecond},
			wantCode:    http.StatusServiceUnavailable, wantMessage: `this cache is adopting shard "s" and has not claimed it yet`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table, store := newTable(t, tc.tableConfig)
			err := table.Admit(context.Background(), s)
			switch {
			case tc.wantCode == 0 && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantCode != 0 && err == nil:
				t.Fatalf("accepted, want %d", tc.wantCode)
			case err != nil:
				st := err.ErrStatus
				if st.Code != tc.wantCode {
					t.Errorf("code %d, want %d", st.Code, tc.wantCode)
				}
				wantReason := map[int32]metav1.StatusReason{http.StatusForbidden: metav1.StatusReasonForbidden, http.StatusServiceUnavailable: metav1.StatusReasonServiceUnavailable}[tc.wantCode]
				if st.Reason != wantReason {
					t.Errorf("reason %q, want %q", st.Reason, wantReason)
				}
				if !strings.Contains(st.Message, tc.wantMessage) {
					t.Errorf("message %q, want it to hold %q", st.Message, tc.wantMessage)
				}
				var causes []string
				if st.Details != nil {
					for _, c := range st.Details.Causes {
						causes = append(causes, string(c.Type)+" "+c.Field)
					}
				}
				if strings.Join(causes, ", ") != strings.Join(tc.wantCauses, ", ") {
					t.Errorf("causes %q, want %q", causes, tc.wantCauses)
				}
				if tc.wantCode == http.StatusServiceUnavailable && (st.Details == nil || st.Details.Name != s || st.Details.RetryAfterSeconds != 1) {
					t.Errorf("details %+v, want the shard named and a retry after 1 s", st.Details)
				}
			}
			got := claimOf(table, s)
			if tc.wantClaim == "*/1" && (got == "west/1" || got == "south/1") {
				got = "*/1"
			}
			if got != tc.wantClaim {
				t.Errorf("claim afterwards %q, want %q", got, tc.wantClaim)
			}
			if tc.wantPersisted {
				// What a restart reads back.
				again, err := homes.New(homes.Config{CacheName: "east", Store: store})
				if err != nil {
					t.Fatal(err)
				}
				if err := again.Load(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := claimOf(again, s); got != tc.wantClaim {
					t.Errorf("claim persisted %q, want %q", got, tc.wantClaim)
				}
			}
		})
	}
}

// WithWriteAdmission asks the claims about every write into a shard's
// partition by anyone but the server itself, and nothing else.
func TestWriteAdmissionFilter(t *testing.T) {
	// west is down: a write of a shard with no claim would be refused.
	table, _ := newTable(t, tableConfig{
		persisted: `{"claims":[{"shard":"s-west","home":"west","generation":1},{"shard":"s-east","home":"east","generation":1}]}`,
		peers:     map[string]peerSpec{"west": {down: true}},
	})
	tests := []struct {
		name     string
		user     string
		verb     string
		resource bool
		scope    kcpcache.Scope
		want     int
	}{
		{"a shard creating in a partition homed elsewhere", "system:kcp:shard:s-west", "create", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusForbidden},
		{"an admin deleting there", "admin", "delete", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusForbidden},
		{"a patch there", "admin", "patch", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusForbidden},
		{"a collection deleted there", "admin", "deletecollection", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusForbidden},
		{"an update in a partition homed here", "admin", "update", true, kcpcache.Scope{Shard: "s-east", Cluster: "root"}, http.StatusOK},
		{"a read of a partition homed elsewhere", "admin", "get", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusOK},
		{"the server's own write (the mirror's copies)", user.APIServerUser, "create", true, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusOK},
		{"a write through the wildcard shard", "admin", "deletecollection", true, kcpcache.Scope{Shard: kcpcache.Wildcard, Cluster: "root"}, http.StatusOK},
		{"a write in the system scope", "admin", "create", true, kcpcache.SystemScope, http.StatusOK},
		{"a write of a shard with no claim, west down", "admin", "create", true, kcpcache.Scope{Shard: "s-new", Cluster: "root"}, http.StatusServiceUnavailable},
		{"a non-resource request", "admin", "create", false, kcpcache.Scope{Shard: "s-west", Cluster: "root"}, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served := false
			h := homes.WithWriteAdmission(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }), table, scheme.Codecs)
			ctx := request.WithRequestInfo(context.Background(), &request.RequestInfo{IsResourceRequest: tc.resource, Verb: tc.verb, APIGroup: "apis.kcp.io", APIVersion: "v1alpha1", Resource: "apiexports"})
			ctx = request.WithUser(ctx, &user.DefaultInfo{Name: tc.user})
			ctx = kcpcache.WithScope(ctx, tc.scope)
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/x", nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want || served != (tc.want == http.StatusOK) {
				t.Fatalf("status %d, served %v; want %d", rec.Code, served, tc.want)
			}
			if tc.want != http.StatusOK {
				var st metav1.Status
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
					t.Fatal(err)
				}
				if tc.want == http.StatusForbidden && (st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, `the home of shard "s-west" is the cache "west"`)) {
					t.Errorf("status %+v, want Forbidden naming west", st)
				}
				if tc.want == http.StatusServiceUnavailable && (st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != homes.ReasonHomeUnreachable) {
					t.Errorf("status %+v, want one cause %s", st, homes.ReasonHomeUnreachable)
				}
			}
		})
	}
}
