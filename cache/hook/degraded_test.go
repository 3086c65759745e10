package hook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/component-base/metrics/testutil"
)

func TestStatusTransitions(t *testing.T) {
	ctx := context.Background()
	s := NewStatus()
	check := func(wantCode int, wantBody string, wantGauge map[Reason]float64) {
		t.Helper()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz/cache-replication", nil))
		if rec.Code != wantCode || !strings.Contains(rec.Body.String(), wantBody) {
			t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), wantCode, wantBody)
		}
		for r, want := range wantGauge {
			got, err := testutil.GetGaugeMetricValue(degradedGauge.WithLabelValues(string(r)))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("gauge %s = %v, want %v", r, got, want)
			}
		}
	}
	check(http.StatusServiceUnavailable, "Starting", map[Reason]float64{ReasonStarting: 1, ReasonCacheUnreachable: 0})
	s.Degrade(ctx, ReasonCacheUnreachable, "dial tcp: connection refused")
	check(http.StatusServiceUnavailable, "CacheUnreachable: dial tcp", map[Reason]float64{ReasonStarting: 0, ReasonCacheUnreachable: 1})
	s.Recover(ctx)
	check(http.StatusOK, "ok", map[Reason]float64{ReasonStarting: 0, ReasonCacheUnreachable: 0, ReasonInformersNotSynced: 0})
}
