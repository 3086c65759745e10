package robustness

import (
	"fmt"
	"sort"
)

// checkWatch checks one watcher's events against the acknowledged writes
// of the history. A chain is the sessions from one list to the next 410:
// each session resumed from the last revision the previous one delivered.
// Within a chain, events come in revision order (bookmarks never go back),
// none twice, none missing: every acknowledged create or update whose
// revision lies between the chain's start and the last revision it
// delivered is one of its events, with the object the write acknowledged.
func checkWatch(events []WatchEvent, ops []Op) []Violation {
	written := map[int64]Op{}
	for _, op := range ops {
		if (op.Input.Op == OpCreate || op.Input.Op == OpUpdate) && op.Output.Status == StatusOK {
			written[op.Output.RV] = op
		}
	}
	var out []Violation
	var chain []WatchEvent
	var chainStart int64
	flush := func() {
		out = append(out, checkChain(chain, chainStart, written)...)
		chain = nil
	}
	session := -1
	var last int64
	for _, ev := range events {
		if ev.Session != session {
			if session >= 0 && ev.FromRV != last && len(chain) > 0 {
				out = append(out, Violation{Check: "watch-resume", Details: fmt.Sprintf("session %d resumed from %d, the previous one ended at %d", ev.Session, ev.FromRV, last)})
			}
			if len(chain) == 0 {
				chainStart, last = ev.FromRV, ev.FromRV
			}
			session = ev.Session
		}
		if ev.Type == "GONE" {
			flush()
			continue
		}
		if ev.Type == "BOOKMARK" {
			if ev.RV < last {
				out = append(out, Violation{Check: "watch-order", Details: fmt.Sprintf("a bookmark at %d after an event at %d", ev.RV, last)})
			}
			last = max(last, ev.RV)
			continue
		}
		chain = append(chain, ev)
		last = max(last, ev.RV)
	}
	flush()
	return out
}

func checkChain(chain []WatchEvent, start int64, written map[int64]Op) []Violation {
	var out []Violation
	seen := map[int64]bool{}
	prev := start
	var end int64 = start
	for _, ev := range chain {
		if ev.RV <= prev {
			if seen[ev.RV] {
				out = append(out, Violation{Check: "watch-duplicate", Details: fmt.Sprintf("%s of %s at %d delivered twice", ev.Type, ev.Key, ev.RV)})
			} else {
				out = append(out, Violation{Check: "watch-order", Details: fmt.Sprintf("%s of %s at %d after an event at %d", ev.Type, ev.Key, ev.RV, prev)})
			}
		}
		seen[ev.RV] = true
		prev = max(prev, ev.RV)
		end = max(end, ev.RV)
		if op, ok := written[ev.RV]; ok && (ev.Type == "DELETED" || op.Input.Key != ev.Key || op.Input.Value != ev.Value) {
			out = append(out, Violation{Check: "watch-content", Details: fmt.Sprintf("%s of %s=%q at %d, but the write acknowledged at %d was %s of %s=%q", ev.Type, ev.Key, ev.Value, ev.RV, ev.RV, op.Input.Op, op.Input.Key, op.Input.Value)})
		}
	}
	var missing []int64
	for rv := range written {
		if rv > start && rv <= end && !seen[rv] {
			missing = append(missing, rv)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	for _, rv := range missing {
		op := written[rv]
		out = append(out, Violation{Check: "watch-gap", Details: fmt.Sprintf("the %s of %s=%q acknowledged at %d is missing from a watch that delivered (%d, %d]", op.Input.Op, op.Input.Key, op.Input.Value, rv, start, end)})
	}
	return out
}
