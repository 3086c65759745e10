package mirror

// A shard's home moves only by an explicit claim (homes.go): the operator
// starts (or restarts) the new home with --adopt-shard, which claims the
// shard at a higher generation, and points the shard at it; the shard pushes
// its partition there in full, as its replication does at every start.
//
//   - The new home takes the shard's writes and no longer takes the
//     shard's objects from the old home. The copies it mirrored before stay
//     until the shard's push replaces or deletes them: nothing the shard
//     had is missing meanwhile.
//   - The old home, reading the higher claim in the new home's table, gives
//     the shard up: it lists that peer again, and its own objects of the
//     shard become the peer's to replace (those the new home holds) or
//     delete (the others). This is the only path on which a home's own
//     objects are replaced by copies. The shard's writes at the old home
//     are refused from then on.
//   - Every other cache follows the new home the same way: copies whose
//     home was the old one are deleted once the old home no longer holds
//     them as its own, and taken from the new home.

// requestRelist makes every stream of the peer list again.
func (p *peer) requestRelist() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.relist)
	p.relist = make(chan struct{})
}

// relistChan is closed at the next requestRelist.
func (p *peer) relistChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.relist
}
