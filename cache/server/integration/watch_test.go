package integration_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// collect reads n events from w, failing on a deadline.
func collect(t *testing.T, w watch.Interface, n int) []watch.Event {
	t.Helper()
	var events []watch.Event
	deadline := time.After(30 * time.Second)
	for len(events) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(events), n)
			}
			if e.Type == watch.Error {
				t.Fatalf("watch error: %v", e.Object)
			}
			if e.Type == watch.Bookmark {
				continue
			}
			events = append(events, e)
		case <-deadline:
			t.Fatalf("got %d of %d events before the deadline", len(events), n)
		}
	}
	return events
}

func eventPartitions(events []watch.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, string(e.Type)+" "+partitionOf(*e.Object.(*unstructured.Unstructured)))
	}
	sort.Strings(out)
	return out
}

func TestWatchFromAnOldResourceVersionAcrossPartitions(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	start, err := dyn(t, srv, "*", "*").Resource(apiExports).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range partitions {
		if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, apiExport("shared", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := dyn(t, srv, "blue", "root").Resource(apiExports).Delete(ctx, "shared", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		shard, cluster string
		want           []string
	}{
		{"*", "*", []string{"ADDED amber/org1/shared", "ADDED amber/root/shared", "ADDED blue/org1/shared", "ADDED blue/root/shared", "DELETED blue/root/shared"}},
		{"*", "root", []string{"ADDED amber/root/shared", "ADDED blue/root/shared", "DELETED blue/root/shared"}},
		{"amber", "*", []string{"ADDED amber/org1/shared", "ADDED amber/root/shared"}},
		{"blue", "root", []string{"ADDED blue/root/shared", "DELETED blue/root/shared"}},
	}
	for _, tt := range tests {
		// Every write happened after start's resourceVersion, so a watch
		// from it replays them from the watch cache's history.
		w, err := dyn(t, srv, tt.shard, tt.cluster).Resource(apiExports).Watch(ctx, metav1.ListOptions{ResourceVersion: start.GetResourceVersion()})
		if err != nil {
			t.Fatalf("%s/%s: %v", tt.shard, tt.cluster, err)
		}
		got := eventPartitions(collect(t, w, len(tt.want)))
		w.Stop()
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("watch %s/%s = %v, want %v", tt.shard, tt.cluster, got, tt.want)
		}
	}
}

func TestWatchOneNameThroughAWildcard(t *testing.T) {
	t.Parallel()
	srv := cachetest.StartServer(t)
	ctx := testContext(t)
	w, err := dyn(t, srv, "*", "*").Resource(apiExports).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=target"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, name := range []string{"other", "target"} {
		for _, p := range partitions[:2] {
			if _, err := dyn(t, srv, p[0], p[1]).Resource(apiExports).Create(ctx, apiExport(name, nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := eventPartitions(collect(t, w, 2))
	if want := []string{"ADDED amber/org1/target", "ADDED amber/root/target"}; !reflect.DeepEqual(got, want) {
		t.Errorf("single-name watch = %v, want %v", got, want)
	}
}
