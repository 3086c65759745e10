package robustness

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// The stale-read checks on small histories written by hand: each broken
// promise is named, and answers that keep them are not.
func TestStaleReadChecks(t *testing.T) {
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	// k0 created at revision 10 (acknowledged at 1 s), updated at 20
	// (acknowledged at 2 s); the home's watch saw both and nothing else
	// from revision 5 to 30.
	h := History{
		Ops: []Op{
			{Input: Input{Op: OpCreate, Key: "k0", Value: "a"}, Output: Output{Status: StatusOK, Value: "a", RV: 10}, Call: sec(0.9), Return: sec(1)},
			{Input: Input{Op: OpUpdate, Key: "k0", Value: "b", FromRV: 10}, Output: Output{Status: StatusOK, Value: "b", RV: 20}, Call: sec(1.9), Return: sec(2)},
		},
		Watches: [][]WatchEvent{{
			{Session: 0, FromRV: 5, Type: "ADDED", Key: "k0", Value: "a", RV: 10},
			{Session: 0, FromRV: 5, Type: "MODIFIED", Key: "k0", Value: "b", RV: 20},
			{Session: 0, FromRV: 5, Type: "BOOKMARK", RV: 30},
		}},
	}
	read := func(status, value string, rv, header int64, age time.Duration, call float64) StaleRead {
		return StaleRead{Key: "k0", At: 1, Call: sec(call), Return: sec(call + 0.01), Status: status, Value: value, RV: rv, HomeRevision: header, Age: age}
	}
	for _, tc := range []struct {
		name string
		read StaleRead
		want string // the check named, or "" for none
	}{
		{"current copy", read(StatusOK, "b", 20, 20, 0, 3), ""},
		{"old copy, old header, age true", read(StatusOK, "a", 10, 15, 1500*time.Millisecond, 3.5), ""},
		{"old copy, old header, age too young", read(StatusOK, "a", 10, 15, 200*time.Millisecond, 3.5), "stale-age"},
		{"copy misses a change the header counts", read(StatusOK, "a", 10, 20, 0, 3), "stale-revision"},
		{"copy with a value its home never had at its revision", read(StatusOK, "x", 20, 20, 0, 3), "stale-content"},
		{"absent although the home held it at the header's revision", read(StatusNotFound, "", 0, 20, 0, 3), "stale-absent"},
		{"absent before its creation", read(StatusNotFound, "", 0, 8, 10*time.Second, 3), ""},
		{"copy past its header", read(StatusOK, "b", 20, 15, 0, 1.95), "stale-beyond-header"},
		{"absent with a deletion past its header", read(StatusNotFound, "", 0, 25, 0, 4.5), "stale-absent"},
		{"absent at the deletion's revision", read(StatusNotFound, "", 0, 40, 0, 4.5), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h
			// k0 deleted at 40 (acknowledged at 4 s), seen by a watch
			// from 30 to 50.
			h.Ops = append(slices.Clone(h.Ops), Op{Input: Input{Op: OpDelete, Key: "k0"}, Output: Output{Status: StatusOK}, Call: sec(3.9), Return: sec(4)})
			h.Watches = append(slices.Clone(h.Watches), []WatchEvent{
				{Session: 0, FromRV: 30, Type: "DELETED", Key: "k0", Value: "b", RV: 40},
				{Session: 0, FromRV: 30, Type: "BOOKMARK", RV: 50},
			})
			h.StaleReads = []StaleRead{tc.read}
			violations := checkStaleReads(h)
			var checks []string
			for _, v := range violations {
				checks = append(checks, v.Check)
			}
			switch {
			case tc.want == "" && len(checks) > 0:
				t.Errorf("violations %v, want none", violations)
			case tc.want != "" && !slices.Contains(checks, tc.want):
				t.Errorf("violations %v, want %s", violations, tc.want)
			}
		})
	}
}

// TestStaleReadsNamingAnotherCacheAreNotJudged: a leaf that does not know
// a shard's home yet answers a stale read for the one peer it covers, its
// relay, and names the relay's revision and age. The reader records only
// answers that name the partition's home: a relay's revision is no
// revision of the home's, and judged as one it made the tree shape report
// a stale-age that no answer had claimed.
func TestStaleReadsNamingAnotherCacheAreNotJudged(t *testing.T) {
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(kcpcache.HomeRevisionHeader, header+"=e1/90")
		w.Header().Set(kcpcache.FreshnessAgeHeader, header+"=0.233")
		http.NotFound(w, nil)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		names string
		home  string
		// spaces rank the homes of a partition whose home moves.
		spaces *HomeSpaces
		want   bool
	}{
		{names: "l3", home: "l3", want: true},
		{names: "r1", home: "l3"},
		{names: "a", spaces: NewHomeSpaces("a"), want: true},
		{names: "c", spaces: NewHomeSpaces("a")},
	} {
		header = tc.names
		s, err := NewStaleReader(&rest.Config{Host: srv.URL}, tc.home, tc.spaces)
		if err != nil {
			t.Fatal(err)
		}
		rec := NewRecorder()
		s.read(context.Background(), s.clientWith(client.NewHomeRevisions()), rec, "k3", 1, 0)
		if got := len(rec.History().StaleReads) == 1; got != tc.want {
			t.Errorf("an answer naming %s, the partition homed at %q (spaces %v): recorded %v, want %v", tc.names, tc.home, tc.spaces != nil, got, tc.want)
		}
	}
}
