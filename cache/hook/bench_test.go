package hook

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/replication"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// BenchmarkHeartbeatRenewal measures one renewal (a server-side apply of the
// whole heartbeat) against a same-run baseline: a GET of the same object,
// one round trip to the same server with the same identity.
//
//	go test -run '^$' -bench BenchmarkHeartbeatRenewal ./cache/hook/
func BenchmarkHeartbeatRenewal(b *testing.B) {
	srv := cachetest.StartServer(b)
	cfg := srv.ShardConfig(b, "amber")
	cfg = client.Unthrottled(cfg)
	cc, err := client.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	status := func() replication.Status {
		return replication.Status{Converged: true, Epoch: "e", EpochKnown: true, Resources: []replication.ResourceStatus{
			{GVR: schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiexports"}, Objects: 1000, NewestOriginResourceVersion: "123456"},
			{GVR: schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}, Objects: 3000, NewestOriginResourceVersion: "123450"},
		}}
	}
	h := newHeartbeater("amber", cc, status, 5*time.Second)
	ctx := context.Background()
	if err := h.renew(ctx); err != nil {
		b.Fatal(err)
	}
	var renewal, get time.Duration
	b.Run("renewal", func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			if err := h.renew(ctx); err != nil {
				b.Fatal(err)
			}
		}
		renewal = time.Since(start) / time.Duration(b.N)
	})
	b.Run("baseline-get", func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			if _, err := h.client.Get(ctx, "amber", metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		get = time.Since(start) / time.Duration(b.N)
	})
	b.ReportMetric(float64(renewal)/float64(get), "renewal/get")
	b.Logf("renewal %s, GET %s, ratio %.2f", renewal, get, float64(renewal)/float64(get))
}
