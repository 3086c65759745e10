package mirror

import (
	"net/http/httptest"
	"testing"
)

// serveAt: the revision a stale read at a mirror is served at, given what
// it asked for.
func TestServeAt(t *testing.T) {
	tests := []struct {
		name  string
		query string
		exact bool
		// ok is whether the read is served at revision 42; query its
		// query then.
		ok        bool
		wantQuery string
	}{
		{"a GET with resourceVersion=0", "resourceVersion=0", false, true, "resourceVersion=42"},
		{"a LIST with resourceVersion=0: exactly at it", "resourceVersion=0", true, true, "resourceVersion=42&resourceVersionMatch=Exact"},
		{"an older revision", "resourceVersion=7", false, true, "resourceVersion=42"},
		{"the same revision", "resourceVersion=42", true, true, "resourceVersion=42&resourceVersionMatch=Exact"},
		{"NotOlderThan an older revision", "resourceVersion=7&resourceVersionMatch=NotOlderThan", false, true, "resourceVersion=42&resourceVersionMatch=NotOlderThan"},
		{"NotOlderThan, a LIST", "resourceVersion=7&resourceVersionMatch=NotOlderThan", true, true, "resourceVersion=42&resourceVersionMatch=Exact"},
		{"the read's other parameters are kept", "labelSelector=a%3Db&limit=5&resourceVersion=0", true, true, "labelSelector=a%3Db&limit=5&resourceVersion=42&resourceVersionMatch=Exact"},
		{"a newer revision: not served at 42", "resourceVersion=43", false, false, "resourceVersion=43"},
		{"a newer revision, a LIST", "resourceVersion=43&resourceVersionMatch=NotOlderThan", true, false, "resourceVersion=43&resourceVersionMatch=NotOlderThan"},
		{"an exact match of its own", "resourceVersion=7&resourceVersionMatch=Exact", true, false, "resourceVersion=7&resourceVersionMatch=Exact"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/services/cache/shards/s/clusters/c/apis/g/v1/things?"+tc.query, nil)
			if ok := serveAt(req, 42, tc.exact); ok != tc.ok {
				t.Errorf("served at 42: %v, want %v", ok, tc.ok)
			}
			if req.URL.RawQuery != tc.wantQuery {
				t.Errorf("query %q, want %q", req.URL.RawQuery, tc.wantQuery)
			}
		})
	}
}
