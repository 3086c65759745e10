package dataplane

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// copyScopes holds, per request scope, the same scope with a field manager
// that tracks no fields (see withoutDiscardedFieldManager).
type copyScopes struct {
	mu     sync.Mutex
	scopes map[*handlers.RequestScope]*handlers.RequestScope
}

// maxCopyScopes bounds the map; scopes of types no longer served stay in it
// until then.
const maxCopyScopes = 1024

// withoutDiscardedFieldManager serves a write with scope, or, when storage
// will give the written copy its origin's field ownership
// (partition.OwnershipFromOrigin), with a scope whose field manager tracks
// no fields: upstream's field manager converts the whole object, and the
// stored one, to typed values and compares them to record the writer as a
// manager, about half of a create's CPU in the handler, for a record that
// storage replaces with the origin's. Upstream's handlers need a field
// manager, so it is one that sees every object as empty. Server-side apply,
// JSON patches and writes to the system partition keep the real one.
func (c *copyScopes) withoutDiscardedFieldManager(scope *handlers.RequestScope, serve func(*handlers.RequestScope) http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !partition.OwnershipFromOrigin(req.Context()) {
			serve(scope).ServeHTTP(w, req)
			return
		}
		copyScope, err := c.get(scope)
		if err != nil {
			// Not expected (the real field manager was built from the
			// same parts); the real one gives the same stored result.
			serve(scope).ServeHTTP(w, req)
			return
		}
		serve(copyScope).ServeHTTP(w, req)
	})
}

func (c *copyScopes) get(scope *handlers.RequestScope) (*handlers.RequestScope, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.scopes[scope]; ok {
		return s, nil
	}
	fm, err := managedfields.NewDefaultCRDFieldManager(emptyTypeConverter{}, scope.Convertor, scope.Defaulter, scope.Creater, scope.Kind, scope.HubGroupVersion, "", nil)
	if err != nil {
		return nil, err
	}
	s := *scope
	s.FieldManager = fm
	if c.scopes == nil || len(c.scopes) >= maxCopyScopes {
		c.scopes = map[*handlers.RequestScope]*handlers.RequestScope{}
	}
	c.scopes[scope] = &s
	return &s, nil
}

// emptyTypeConverter sees every object as an empty map, so that a field
// manager built on it records no fields and costs next to nothing. Only
// updates use it; apply keeps the real one.
//
// An update still converts the object to the version of every manager
// recorded in the body's managedFields (smd's merge.Updater, through
// apimachinery's versionConverter, which calls TypedToObject). A copy's
// body carries its origin's managers, often of another version (kcp
// applies APIExports as v1alpha1 and replicates them as v1alpha2), so
// TypedToObject answers "version not registered": the updater then skips
// that manager instead of failing the update, which upstream would log as
// "[SHOULD NOT HAPPEN] failed to update managedFields" on every such
// write. Skipping loses nothing: storage replaces the record with the
// origin's (partition.OwnershipFromOrigin).
type emptyTypeConverter struct{}

var errEmptyTypeConverter = runtime.NewNotRegisteredErrForKind("kcp-cache's field manager of copies", schema.GroupVersionKind{})

var emptyObject = func() *typed.TypedValue {
	v, err := typed.DeducedParseableType.FromUnstructured(map[string]interface{}{})
	if err != nil {
		panic(err)
	}
	return v
}()

func (emptyTypeConverter) ObjectToTyped(runtime.Object, ...typed.ValidationOptions) (*typed.TypedValue, error) {
	return emptyObject, nil
}

func (emptyTypeConverter) TypedToObject(*typed.TypedValue) (runtime.Object, error) {
	return nil, errEmptyTypeConverter
}
