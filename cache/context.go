package cache

import "context"

type scopeKeyType int

const scopeKey scopeKeyType = iota

// WithScope returns a context that carries the request's partition scope.
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey, s)
}

// ScopeFrom returns the scope carried by ctx, if any.
func ScopeFrom(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey).(Scope)
	return s, ok
}
