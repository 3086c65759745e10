package partition

import (
	"context"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
)

// Only the fill, which no request asked for, reads larger pages; a
// request's list keeps the client's limit, and an unpaged list stays so.
func TestFillPagingRaisesOnlyTheFillsPages(t *testing.T) {
	fromRequest := request.WithRequestInfo(context.Background(), &request.RequestInfo{Verb: "list"})
	for _, c := range []struct {
		name  string
		ctx   context.Context
		limit int64
		want  int64
	}{
		{"the cacher's page", context.Background(), 10000, fillPage},
		{"a page already larger", context.Background(), fillPage + 1, fillPage + 1},
		{"an unpaged fill", context.Background(), 0, 0},
		{"a client's page", fromRequest, 10000, 10000},
		{"a client's small page", fromRequest, 5, 5},
	} {
		opts := storage.ListOptions{Predicate: storage.SelectionPredicate{Limit: c.limit}}
		if got := fillPaging(c.ctx, opts).Predicate.Limit; got != c.want {
			t.Errorf("%s: limit %d became %d, want %d", c.name, c.limit, got, c.want)
		}
	}
}
