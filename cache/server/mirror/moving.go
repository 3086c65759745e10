package mirror

// A shard's home moves when the shard is pointed at another cache: the
// operator starts (or restarts) the new home with --adopt-shard, and the
// shard pushes its partition there in full, as its replication does at
// every start (an exact mirror of the shard).
//
//   - The new home never mirrors an adopted shard from a peer and accepts
//     its writes. The copies it mirrored before stay until the shard's push
//     replaces or deletes them: nothing the shard had is missing meanwhile.
//   - The old home sees the shard's objects at the new home written there
//     (home objects of that peer): the peer is the shard's home now. It
//     lists that peer again and treats its own objects of the shard as
//     copies: those the new home holds are overwritten with its version,
//     the others deleted. The shard's writes at the old home are refused
//     from then on.
//   - Every other cache follows the new home the same way: copies whose
//     home was the old one are deleted when the old home stops holding the
//     shard's objects as its own, and taken from the new home.

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
