package robustness

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// checkTimeTravel checks the promise of cache/client's readers: a reader
// that switches caches never accepts an answer older than one it accepted
// before. Each accepted answer is judged by what the history knows of the
// home (its acknowledged writes and its watches); an answer with an object
// is dated by the object, not by the answer's header (the cache's own
// claim), an absent one by its header.
//
// For each reader and key, in the order of the reader's calls (a reader
// reads one key at a time), floor is the home revision from which on the
// reader has seen the key:
//   - an answer with the copy of revision r shows a state that held at the
//     home from r until the key's next known change n (an unknown change
//     only makes a state last longer here, never shorter, so it can hide
//     time travel but not invent it): when n is at or below floor, that
//     state had ended before one the reader had seen began: time-travel.
//     Then floor rises to r.
//   - an absent answer is dated by its header's revision H (whose truth
//     stale-absent checks: the home did not hold the key at H): it shows
//     the absence that held at the home from the last deletion at or
//     before H until the next creation n; when n is at or below floor,
//     time-travel. Then floor rises to that deletion.
func checkTimeTravel(h History) (out []Violation) {
	chains := watchChains(h.Watches)
	changes := knownChanges(h, chains)
	reads := slices.Clone(h.StaleReads)
	sort.SliceStable(reads, func(i, j int) bool {
		if reads[i].Reader != reads[j].Reader {
			return reads[i].Reader < reads[j].Reader
		}
		return reads[i].Call < reads[j].Call
	})
	type readerKey struct {
		reader int
		key    string
	}
	floor := map[readerKey]int64{}
	for _, r := range reads {
		if r.Refused != "" {
			continue
		}
		k := readerKey{r.Reader, r.Key}
		f := floor[k]
		known := changes[r.Key]
		switch r.Status {
		case StatusOK:
			next := int64(math.MaxInt64)
			for _, c := range known {
				if c.rv > r.RV {
					next = c.rv
					break
				}
			}
			if next <= f {
				out = append(out, Violation{Check: "time-travel", Details: fmt.Sprintf("reader %d accepted %q@%d of %s at cache %d, a state its home replaced at %d, after it had seen the key at home revision %d or later", r.Reader, r.Value, r.RV, r.Key, r.At, next, f)})
			}
			floor[k] = max(f, r.RV)
		case StatusNotFound:
			start, next := int64(0), int64(math.MaxInt64)
			for _, c := range known {
				if c.rv <= r.HomeRevision && c.deleted {
					start = c.rv
				}
				if c.rv > r.HomeRevision {
					next = c.rv
					break
				}
			}
			if next <= f {
				out = append(out, Violation{Check: "time-travel", Details: fmt.Sprintf("reader %d accepted the absence of %s at cache %d (home revision %d), which its home ended at %d, after it had seen the key at home revision %d or later", r.Reader, r.Key, r.At, r.HomeRevision, next, f)})
			}
			floor[k] = max(f, start)
		}
	}
	return out
}
