package filters

import (
	"net/http"
	"time"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// WithMajorityAge marks the stale reads a member of an in-memory group
// serves while it is cut off from its majority: a read with a
// resourceVersion (served from the watch cache) carries
// kcpcache.FreshnessAgeHeader "<member>=<seconds>", the time since the
// member last knew a leader, which is never less than how old its data may
// be. What needs the majority (writes, consistent reads) is refused by the
// storage (partition/majority.go).
func WithMajorityAge(handler http.Handler, member string, lost func() (bool, time.Time)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && req.URL.Query().Get("resourceVersion") != "" {
			if cut, since := lost(); cut {
				w.Header().Set(kcpcache.FreshnessAgeHeader, kcpcache.FormatFreshnessAges(map[string]time.Duration{member: time.Since(since)}))
			}
		}
		handler.ServeHTTP(w, req)
	})
}
