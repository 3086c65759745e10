package robustness

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// StaleRead is a read with resourceVersion=0 at a mirror: the copy it
// answered, the home revision the copy claims to reflect
// (Kcp-Cache-Home-Revision) and how long ago it says the home last
// confirmed it (Kcp-Cache-Freshness-Age).
type StaleRead struct {
	Key    string `json:"key"`
	At     int    `json:"at"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Status string `json:"status"` // StatusOK or StatusNotFound
	Value  string `json:"value,omitempty"`
	// RV is the copy's resourceVersion at its home.
	RV int64 `json:"rv,omitempty"`
	// HomeRevision is the home's revision of the last change to the
	// partition the copy includes.
	HomeRevision int64 `json:"homeRevision"`
	// Age is the time since the home last confirmed the copy.
	Age time.Duration `json:"age"`
}

// ageSlack absorbs the header's millisecond rounding and the time between
// the client's clock readings and the server's.
const ageSlack = 100 * time.Millisecond

// change is a change of one key at its home, as the history knows it: an
// acknowledged create or update, or a watch event.
type change struct {
	rv      int64
	value   string
	deleted bool
}

// checkStaleReads checks each stale read against what the history knows of
// its home: the acknowledged writes (their revisions and when they
// returned) and the home's watch events (deletions too, with the revision
// they happened at).
//
// The header's revision H is a lower bound: the copy includes every change
// of the partition at its home up to H (docs/regions.md), and may include
// later ones (the mirror applied them between the header and the read).
//
//   - stale-revision: the home changed the key after the copy's revision
//     and no later than H: a change the answer claims to include is
//     missing;
//   - stale-content: the copy's value is not the one its home had at the
//     copy's revision;
//   - stale-absent: the key is answered absent, but the home held it at H
//     (a watch of the home saw every change from its creation to H, none
//     a deletion) and no deletion of it had even been sent when the answer
//     came: the copy lacks the creation, a change up to H;
//   - stale-age: a write after H was acknowledged before the read was
//     sent, so the copy has not been current since at least then, and the
//     answer says it was confirmed later.
//
// It returns the violations, and how many answers included changes past
// their header's revision (allowed, but a reader that keeps the highest
// revision it saw cannot tell that it saw more).
func checkStaleReads(h History) (out []Violation, beyondHeader int) {
	changes := map[string][]change{}
	add := func(key string, c change) { changes[key] = append(changes[key], c) }
	type ack struct {
		rv  int64
		ret int64
	}
	var acks []ack
	for _, op := range h.Ops {
		if (op.Input.Op == OpCreate || op.Input.Op == OpUpdate) && op.Output.Status == StatusOK && op.Output.RV > 0 {
			add(op.Input.Key, change{rv: op.Output.RV, value: op.Input.Value})
			acks = append(acks, ack{op.Output.RV, op.Return})
		}
	}
	chains := watchChains(h.Watches)
	for _, c := range chains {
		for _, ev := range c.events {
			add(ev.Key, change{rv: ev.RV, value: ev.Value, deleted: ev.Type == "DELETED"})
		}
	}
	for key := range changes {
		sort.Slice(changes[key], func(i, j int) bool { return changes[key][i].rv < changes[key][j].rv })
	}
	// The earliest acknowledgement of a revision above each H is what the
	// age is checked against: by revision, the earliest return from there on.
	sort.Slice(acks, func(i, j int) bool { return acks[i].rv < acks[j].rv })
	earliestAbove := make([]int64, len(acks)+1)
	earliestAbove[len(acks)] = neverReturned
	for i := len(acks) - 1; i >= 0; i-- {
		earliestAbove[i] = min(acks[i].ret, earliestAbove[i+1])
	}

	// The calls of deletions of each key, acknowledged or not.
	deleteCalls := map[string][]int64{}
	for _, op := range h.Ops {
		if op.Input.Op == OpDelete && op.Output.Status != StatusNotFound {
			deleteCalls[op.Input.Key] = append(deleteCalls[op.Input.Key], op.Call)
		}
	}
	for _, r := range h.StaleReads {
		desc := fmt.Sprintf("a stale read of %s at cache %d answered %s %q@%d reflecting home revision %d, age %s", r.Key, r.At, r.Status, r.Value, r.RV, r.HomeRevision, r.Age)
		known := changes[r.Key]
		switch r.Status {
		case StatusOK:
			if r.RV > r.HomeRevision {
				beyondHeader++
			}
			for _, c := range known {
				if c.rv == r.RV && !c.deleted && c.value != r.Value {
					out = append(out, Violation{Check: "stale-content", Details: fmt.Sprintf("%s: the home's value at %d was %q", desc, c.rv, c.value)})
				}
				if c.rv > r.RV && c.rv <= r.HomeRevision {
					out = append(out, Violation{Check: "stale-revision", Details: fmt.Sprintf("%s: the home changed it at %d (deleted: %t), which the answer claims to include", desc, c.rv, c.deleted)})
					break
				}
			}
		case StatusNotFound:
			// The last known change at or before the revision.
			var last *change
			for i := range known {
				if known[i].rv <= r.HomeRevision {
					last = &known[i]
				}
			}
			if last == nil || last.deleted || slices.ContainsFunc(deleteCalls[r.Key], func(call int64) bool { return call < r.Return }) {
				break
			}
			for _, c := range chains {
				if c.start <= last.rv && c.end >= r.HomeRevision {
					out = append(out, Violation{Check: "stale-absent", Details: fmt.Sprintf("%s: the home held %q@%d, and a watch of the home that saw every change from %d to %d saw no deletion", desc, last.value, last.rv, c.start, c.end)})
					break
				}
			}
		}
		i := sort.Search(len(acks), func(i int) bool { return acks[i].rv > r.HomeRevision })
		if ret := earliestAbove[i]; ret < r.Call {
			if least := time.Duration(r.Call - ret); r.Age+ageSlack < least {
				out = append(out, Violation{Check: "stale-age", Details: fmt.Sprintf("%s: a write after that revision was acknowledged %s before the read was sent", desc, least.Round(time.Millisecond))})
			}
		}
	}
	return out, beyondHeader
}

// chain is a run of watch sessions from one list to the next 410: it saw
// every change of the partition in (start, end].
type chain struct {
	start, end int64
	events     []WatchEvent
}

// watchChains splits each watcher's events into chains (see checkWatch,
// which checks that they hold every change).
func watchChains(watches [][]WatchEvent) []chain {
	var out []chain
	for _, events := range watches {
		var cur *chain
		session := -1
		for _, ev := range events {
			if ev.Session != session && cur == nil {
				cur = &chain{start: ev.FromRV, end: ev.FromRV}
			}
			session = ev.Session
			if ev.Type == "GONE" {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.end = max(cur.end, ev.RV)
			if ev.Type != "BOOKMARK" {
				cur.events = append(cur.events, ev)
			}
		}
		if cur != nil {
			out = append(out, *cur)
		}
	}
	return out
}
