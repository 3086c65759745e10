// Package cache holds the vocabulary shared by every part of kcp-cache: the
// annotations that tie a copy to its shard and logical cluster, the scope a
// request is served in (a shard and a cluster, either of which may be the
// read-only wildcard "*"), the URL layout that carries that scope, and the
// context helpers that move it from the HTTP layer to storage.
//
// No other package re-defines these names; import them from here.
package cache
