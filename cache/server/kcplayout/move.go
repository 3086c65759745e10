package kcplayout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	rpctypes "go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// pageSize is how many keys one read of the scan returns: etcd answers
	// a limited range after visiting every key of the range in its index
	// (see scanBounds), so fewer, larger pages cost fewer visits. A page of
	// keys (the values are not sent) is about 1 MB at 10,000.
	pageSize = 10000
	// maxAttempts bounds the retries of one key whose revision changed
	// between its read and its transaction (another server writing it).
	maxAttempts = 10
	// maxScans bounds the restarts of a scan whose revision was compacted
	// under it.
	maxScans = 3
	// maxExamples is how many skipped keys a Report names.
	maxExamples = 10
	// scanReaders is how many of the scan's ranges are read at once. The
	// scan of a start is etcd's work (it reads and decodes every value of
	// a range to answer with its keys) while the server waits, one request
	// at a time: about 1.4 s at a quarter of a million objects with one
	// core of two idle. Ranges are a resource's keys (scanBounds), so a
	// few readers keep both busy.
	scanReaders = 3
	// pagesAhead bounds the pages a reader holds for a range the visits
	// have not reached (about 1 MB each).
	pagesAhead = 8
)

// Report counts what a Migrate or an Export found and did.
type Report struct {
	// Keys is how many keys below the prefix were scanned.
	Keys int
	// InPlace is how many objects were already in the target layout.
	InPlace int
	// Moved is how many objects moved to the target layout.
	Moved int
	// Annotated is how many objects got their partition annotations
	// (Migrate: CRDs kcp's cache-server stored without them).
	Annotated int
	// Superseded is how many objects were found at both keys, the older
	// of which was deleted.
	Superseded int
	// Removed is how many keys only this server uses were deleted (Export).
	Removed int
	// Skipped is how many keys are in neither layout; they were left.
	Skipped int
	// SkippedExamples are the first of them.
	SkippedExamples []string
}

func (r *Report) skip(key string) {
	r.Skipped++
	if len(r.SkippedExamples) < maxExamples {
		r.SkippedExamples = append(r.SkippedExamples, key)
	}
}

// KeysAndValues are r's counts, for a structured log line.
func (r Report) KeysAndValues() []any {
	kv := []any{"keys", r.Keys, "inPlace", r.InPlace, "moved", r.Moved, "annotated", r.Annotated,
		"superseded", r.Superseded, "removed", r.Removed, "skipped", r.Skipped}
	if r.Skipped > 0 {
		kv = append(kv, "skippedExamples", r.SkippedExamples)
	}
	return kv
}

// Changed reports whether anything was written.
func (r Report) Changed() bool {
	return r.Moved+r.Annotated+r.Superseded+r.Removed > 0
}

// scan calls visit with every key below prefix, in key order, read keys
// only, in pages at one revision and several ranges at once (scanOnce):
// the keys a visit writes (an object moved further on in key order) are
// not visited again. A revision compacted during the scan
// starts it again; visits are idempotent.
func scan(ctx context.Context, kv clientv3.KV, prefix string, visit func(key string) error) error {
	start := strings.TrimSuffix(prefix, "/") + "/"
	end := clientv3.GetPrefixRangeEnd(start)
	for attempt := 1; ; attempt++ {
		err := scanOnce(ctx, kv, start, end, visit)
		if !errors.Is(err, rpctypes.ErrCompacted) || attempt == maxScans {
			return err
		}
	}
}

// scanOnce visits every key of [start, end) at one revision, in ranges that
// end where a declared resource's keys do.
func scanOnce(ctx context.Context, kv clientv3.KV, start, end string, visit func(key string) error) error {
	bounds, rev, err := scanBounds(ctx, kv, start, end)
	if err != nil {
		return err
	}
	if err := visitRanges(ctx, kv, bounds, rev, pageSize, visit); err != nil {
		return fmt.Errorf("listing the keys below %s: %w", start, err)
	}
	return nil
}

// visitRanges visits the keys between bounds at rev, in order, with pages of
// page keys read by scanReaders readers ahead of the visits.
func visitRanges(ctx context.Context, kv clientv3.KV, bounds []string, rev, page int64, visit func(key string) error) error {
	n := len(bounds) - 1
	ctx, cancel := context.WithCancel(ctx)
	// Readers take ranges in key order, so the range the visits wait for
	// is always being read; each closes its range's channel when done.
	type keysPage struct {
		keys []string
		err  error
	}
	pages := make([]chan keysPage, n)
	for i := range pages {
		pages[i] = make(chan keysPage, pagesAhead)
	}
	var next atomic.Int64
	var readers sync.WaitGroup
	for range min(scanReaders, n) {
		readers.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				send := func(p keysPage) bool {
					select {
					case pages[i] <- p:
						return true
					case <-ctx.Done():
						return false
					}
				}
				err := readRange(ctx, kv, bounds[i], bounds[i+1], rev, page, func(keys []string) bool { return send(keysPage{keys: keys}) })
				if err != nil {
					send(keysPage{err: err})
				}
				close(pages[i])
			}
		})
	}
	defer func() {
		cancel()
		readers.Wait()
	}()
	for i := range n {
		for p := range pages[i] {
			if p.err != nil {
				return p.err
			}
			for _, key := range p.keys {
				if err := visit(key); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// scanBounds cuts [start, end) into ranges at the key prefixes of the
// resources the stored CRDs declare, and returns their bounds, in order,
// with the revision it read the CRDs at. etcd counts every key from a
// limited read's start to its range's end before it answers, so a scan of
// the whole prefix in pages costs keys²/(2×pageSize) index visits (3.1
// million at a quarter of a million objects); pages that end where their
// resource does cost the sum of each resource's keys²/(2×pageSize). Any
// bounds cover the same keys; keys outside every declared resource are read
// in the ranges between them.
func scanBounds(ctx context.Context, kv clientv3.KV, start, end string) ([]string, int64, error) {
	crds := start + crdGroup + "/" + crdResource + "/"
	resp, err := kv.Get(ctx, crds, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("listing the CRDs below %s: %w", start, err)
	}
	bounds := []string{start, end}
	for _, item := range resp.Kvs {
		name := string(item.Key[strings.LastIndexByte(string(item.Key), '/')+1:])
		plural, group, ok := strings.Cut(name, ".")
		if !ok || plural == "" || group == "" {
			continue
		}
		for _, sep := range []string{"/", ":"} {
			p := start + group + "/" + plural + sep
			bounds = append(bounds, p, clientv3.GetPrefixRangeEnd(p))
		}
	}
	bounds = slices.DeleteFunc(bounds, func(b string) bool { return b < start || b > end })
	slices.Sort(bounds)
	return slices.Compact(bounds), resp.Header.Revision, nil
}

// scanRange visits the keys of [from, end) at rev, in pages of page keys.
func scanRange(ctx context.Context, kv clientv3.KV, from, end string, rev int64, page int64, visit func(key string) error) error {
	var visitErr error
	err := readRange(ctx, kv, from, end, rev, page, func(keys []string) bool {
		for _, key := range keys {
			if visitErr = visit(key); visitErr != nil {
				return false
			}
		}
		return true
	})
	if visitErr != nil {
		return visitErr
	}
	return err
}

// readRange reads the keys of [from, end) at rev in pages of page keys and
// hands each page to got, until got returns false.
func readRange(ctx context.Context, kv clientv3.KV, from, end string, rev int64, page int64, got func(keys []string) bool) error {
	for {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(page), clientv3.WithRev(rev))
		if err != nil {
			return err
		}
		keys := make([]string, len(resp.Kvs))
		for i, item := range resp.Kvs {
			keys[i] = string(item.Key)
		}
		if len(keys) > 0 && !got(keys) {
			return nil
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = keys[len(keys)-1] + "\x00"
	}
}

// moveResult is what move did with one object.
type moveResult int

const (
	// moveGone: the source key was gone when read (moved by another run).
	moveGone moveResult = iota
	// moveMoved: the object is now at the destination only.
	moveMoved
	// moveSuperseded: the destination held a later write; the source was
	// deleted.
	moveSuperseded
)

// move moves the object at src to dst in one transaction, with convert
// applied to its value, unless dst holds a later write, which is kept. Both
// keys are read together, and the transaction holds only if neither
// changed since; otherwise they are read again.
func move(ctx context.Context, kv clientv3.KV, src, dst string, convert func([]byte) ([]byte, error)) (moveResult, error) {
	for range maxAttempts {
		read, err := kv.Txn(ctx).Then(clientv3.OpGet(src), clientv3.OpGet(dst)).Commit()
		if err != nil {
			return 0, fmt.Errorf("reading %s and %s: %w", src, dst, err)
		}
		from, to := only(read.Responses[0].GetResponseRange().Kvs), only(read.Responses[1].GetResponseRange().Kvs)
		if from == nil {
			return moveGone, nil
		}
		var toRev int64
		if to != nil {
			toRev = to.ModRevision
		}
		unchanged := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(src), "=", from.ModRevision),
			clientv3.Compare(clientv3.ModRevision(dst), "=", toRev),
		}
		if to != nil && to.ModRevision > from.ModRevision {
			resp, err := kv.Txn(ctx).If(unchanged...).Then(clientv3.OpDelete(src)).Commit()
			if err != nil {
				return 0, fmt.Errorf("deleting %s, superseded by %s: %w", src, dst, err)
			}
			if resp.Succeeded {
				return moveSuperseded, nil
			}
			continue
		}
		value, err := convert(from.Value)
		if err != nil {
			return 0, fmt.Errorf("converting %s: %w", src, err)
		}
		resp, err := kv.Txn(ctx).If(unchanged...).Then(clientv3.OpPut(dst, string(value)), clientv3.OpDelete(src)).Commit()
		if err != nil {
			return 0, fmt.Errorf("moving %s to %s: %w", src, dst, err)
		}
		if resp.Succeeded {
			return moveMoved, nil
		}
	}
	return 0, fmt.Errorf("moving %s to %s: it changed under %d attempts", src, dst, maxAttempts)
}

func only(kvs []*mvccpb.KeyValue) *mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}

// count records a move's result in r.
func (r *Report) count(res moveResult) {
	switch res {
	case moveMoved:
		r.Moved++
	case moveSuperseded:
		r.Superseded++
	}
}
