package mirror

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// listOf is a page whose continue token names the next page's number, "" on
// the last of n.
func listOf(i, n int) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{Object: map[string]interface{}{}}
	l.SetResourceVersion(strconv.Itoa(i))
	if i+1 < n {
		l.SetContinue(strconv.Itoa(i + 1))
	}
	return l
}

func TestPageAheadFetchesInOrderAndOnlyOneAhead(t *testing.T) {
	const n = 5
	var fetched atomic.Int32
	more := func(_ context.Context, token string) (*unstructured.UnstructuredList, error) {
		i, err := strconv.Atoi(token)
		if err != nil {
			t.Errorf("token %q", token)
		}
		fetched.Add(1)
		return listOf(i, n), nil
	}
	p := newPageAhead(context.Background(), listOf(0, n), more)
	defer p.stop()
	for want := 1; want < n; want++ {
		// Before page want is taken, at most page want is fetched: the
		// fetcher waits for the taker.
		deadline := time.Now().Add(5 * time.Second)
		for fetched.Load() < int32(want) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := fetched.Load(); got != int32(want) {
			t.Fatalf("before taking page %d: %d pages fetched, want %d", want, got, want)
		}
		page, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		if got := page.GetResourceVersion(); got != strconv.Itoa(want) {
			t.Fatalf("page %s, want %d", got, want)
		}
	}
	if page, err := p.next(); page != nil || err != nil {
		t.Fatalf("after the last page: %v, %v", page, err)
	}
}

func TestPageAheadReturnsTheFetchError(t *testing.T) {
	boom := errors.New("the peer went away")
	more := func(context.Context, string) (*unstructured.UnstructuredList, error) { return nil, boom }
	p := newPageAhead(context.Background(), listOf(0, 3), more)
	defer p.stop()
	if _, err := p.next(); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
	if page, err := p.next(); page != nil || err != nil {
		t.Fatalf("after an error the pages end: %v, %v", page, err)
	}
}

func TestPageAheadStopEndsAFetchInProgress(t *testing.T) {
	started := make(chan struct{})
	more := func(ctx context.Context, _ string) (*unstructured.UnstructuredList, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	p := newPageAhead(context.Background(), listOf(0, 3), more)
	<-started
	stopped := make(chan struct{})
	go func() { p.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end the fetch in progress")
	}
}
