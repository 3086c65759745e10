package robustness

import (
	"context"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A resourceVersion is a revision of the etcd of the cache that answered.
// While a partition's home stays put, every revision the history holds is
// its home's, and revisions compare. When the home moves (a shape's home
// move fault), the partition's revisions come from the new home's etcd,
// whose numbers say nothing of the old one's. So a partition whose home
// moves records every revision tagged with the rank of the cache whose etcd
// made it (HomeSpaces): the checks then compare revisions of one home with
// each other only, and order the homes by when the partition moved to them
// (a home's rank rises with each move to it: its revisions from before
// were all replaced by the home it moved to in between, at every cache,
// before the writes went on).

// spaceShift leaves a revision its low 40 bits (a trillion writes).
const spaceShift = 40

// HomeSpaces ranks the homes of one partition; nil ranks none, and every
// revision is then recorded as it is.
type HomeSpaces struct {
	mu    sync.Mutex
	ranks map[string]int64
	top   int64
}

// NewHomeSpaces ranks a partition homed at home.
func NewHomeSpaces(home string) *HomeSpaces {
	return &HomeSpaces{ranks: map[string]int64{home: 1}, top: 1}
}

// moved ranks the partition's new home above every earlier one.
func (s *HomeSpaces) moved(to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.top++
	s.ranks[to] = s.top
}

// tag records rv, a revision of cache's etcd.
func (s *HomeSpaces) tag(cache string, rv int64) int64 {
	if s == nil || rv <= 0 {
		return rv
	}
	return s.rank(cache)<<spaceShift | rv
}

// rank is cache's rank (0: not ranked).
func (s *HomeSpaces) rank(cache string) int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranks[cache]
}

// raw is the revision a recorded one was tagged from, as the cache knows it.
func raw(rv int64) int64 { return rv & (1<<spaceShift - 1) }

// spaceOf is the rank of the cache whose etcd made a recorded revision.
func spaceOf(rv int64) int64 { return rv >> spaceShift }

// rvOf is the recorded revision of u as answered by the cache named
// answeredBy: a mirror's copy records its home's revision and the home's
// name (its bookkeeping, which a reader gets by asking: AskBookkeeping).
func (s *HomeSpaces) rvOf(u *unstructured.Unstructured, answeredBy string) int64 {
	a := u.GetAnnotations()
	if homeRV, ok := a[kcpcache.AnnotationHomeResourceVersion]; ok {
		return s.tag(a[kcpcache.AnnotationHome], parseRV(homeRV))
	}
	return s.tag(answeredBy, parseRV(u.GetResourceVersion()))
}

// answeredBy is filled, for a request whose context carries it, with the name
// of the cache that answered (kcpcache.CacheNameHeader).
type answeredBy struct {
	mu    sync.Mutex
	cache string
}

func (a *answeredBy) by() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cache
}

var answerKey = kcpcache.NewContextKey[*answeredBy]("robustness answer")

// withAnswer returns a context whose requests record who answered them in
// the returned answer (with AskBookkeeping's transport).
func withAnswer(ctx context.Context) (context.Context, *answeredBy) {
	a := &answeredBy{}
	return answerKey.With(ctx, a), a
}

// AskBookkeeping makes cfg's requests ask for the copies' bookkeeping (a
// mirror's copy then says its home and home revision) and record which
// cache answered them: what the history needs to place a revision.
func AskBookkeeping(cfg *rest.Config) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			req = req.Clone(req.Context())
			req.Header.Set(kcpcache.CopyBookkeepingHeader, "keep")
			resp, err := rt.RoundTrip(req)
			if a, ok := answerKey.From(req.Context()); ok && resp != nil {
				a.mu.Lock()
				a.cache = resp.Header.Get(kcpcache.CacheNameHeader)
				a.mu.Unlock()
			}
			return resp, err
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
