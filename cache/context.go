package cache

import "context"

// ContextKey carries values of type T in a context. Each ContextKey made by
// NewContextKey is distinct from every other, so packages never collide.
type ContextKey[T any] struct{ name string }

// NewContextKey returns a new key; name shows in debug output only.
func NewContextKey[T any](name string) *ContextKey[T] { return &ContextKey[T]{name: name} }

// With returns a context that carries v under k.
func (k *ContextKey[T]) With(ctx context.Context, v T) context.Context {
	return context.WithValue(ctx, k, v)
}

// From returns the value ctx carries under k, if any.
func (k *ContextKey[T]) From(ctx context.Context) (T, bool) {
	v, ok := ctx.Value(k).(T)
	return v, ok
}

// String names the key.
func (k *ContextKey[T]) String() string { return "kcp-cache " + k.name }

var scopeKey = NewContextKey[Scope]("scope")

// WithScope returns a context that carries the request's partition scope.
func WithScope(ctx context.Context, s Scope) context.Context { return scopeKey.With(ctx, s) }

// ScopeFrom returns the scope carried by ctx, if any.
func ScopeFrom(ctx context.Context) (Scope, bool) { return scopeKey.From(ctx) }
