package robustness

import (
	"fmt"
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
	// Header is Kcp-Cache-Home-Revision as it came (home, epoch and
	// revision), for whoever reads a saved history.
	Header string `json:"header,omitempty"`
	// Age is the time since the home last confirmed the copy.
	Age time.Duration `json:"age"`
	// Reader is the client that read: one memory of the home revisions it
	// accepted (cache/client's), whichever mirror it read at.
	Reader int `json:"reader"`
	// Refused is the reader's refusal of the answer as time travel; the
	// answer is then not recorded.
	Refused string `json:"refused,omitempty"`
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
// The header's revision H is exact: the copy includes every change of the
// partition at its home up to H and none after it (docs/regions.md).
//
//   - stale-revision: the home changed the key after the copy's revision
//     and no later than H: a change the answer claims to include is
//     missing;
//   - stale-beyond-header: the copy is at a revision past H: the answer
//     includes a change its header says it does not, and a reader that
//     keeps the highest revision it saw would take a later, older answer
//     of another cache;
//   - stale-content: the copy's value is not the one its home had at the
//     copy's revision;
//   - stale-absent: the key is answered absent, but the home held it at H
//     (a watch of the home saw every change from its creation to H, none
//     a deletion): the copy lacks the creation, a change up to H, or has
//     a deletion after H;
//   - stale-age: a write after H was acknowledged before the read was
//     sent, so the copy has not been current since at least then, and the
//     answer says it was confirmed later.
func checkStaleReads(h History) (out []Violation) {
	chains := watchChains(h.Watches)
	changes := knownChanges(h, chains)
	type ack struct {
		rv  int64
		ret int64
	}
	var acks []ack
	for _, op := range h.Ops {
		if (op.Input.Op == OpCreate || op.Input.Op == OpUpdate) && op.Output.Status == StatusOK && op.Output.RV > 0 {
			acks = append(acks, ack{op.Output.RV, op.Return})
		}
	}
	// The earliest acknowledgement of a revision above each H is what the
	// age is checked against: by revision, the earliest return from there on.
	sort.Slice(acks, func(i, j int) bool { return acks[i].rv < acks[j].rv })
	earliestAbove := make([]int64, len(acks)+1)
	earliestAbove[len(acks)] = neverReturned
	for i := len(acks) - 1; i >= 0; i-- {
		earliestAbove[i] = min(acks[i].ret, earliestAbove[i+1])
	}

	for _, r := range h.StaleReads {
		if r.Refused != "" {
			continue
		}
		desc := fmt.Sprintf("a stale read of %s at cache %d answered %s %q@%d reflecting home revision %d, age %s", r.Key, r.At, r.Status, r.Value, r.RV, r.HomeRevision, r.Age)
		known := changes[r.Key]
		switch r.Status {
		case StatusOK:
			if r.RV > r.HomeRevision {
				out = append(out, Violation{Check: "stale-beyond-header", Details: fmt.Sprintf("%s: the copy is of revision %d, past its header", desc, r.RV)})
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
			if last == nil || last.deleted {
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
	return out
}

// knownChanges are the changes of each key at its home that the history
// knows, in revision order: the acknowledged creates and updates, and the
// events of the home's watches (deletions too).
func knownChanges(h History, chains []chain) map[string][]change {
	changes := map[string][]change{}
	add := func(key string, c change) { changes[key] = append(changes[key], c) }
	for _, op := range h.Ops {
		if (op.Input.Op == OpCreate || op.Input.Op == OpUpdate) && op.Output.Status == StatusOK && op.Output.RV > 0 {
			add(op.Input.Key, change{rv: op.Output.RV, value: op.Input.Value})
		}
	}
	for _, c := range chains {
		for _, ev := range c.events {
			add(ev.Key, change{rv: ev.RV, value: ev.Value, deleted: ev.Type == "DELETED"})
		}
	}
	for key := range changes {
		sort.Slice(changes[key], func(i, j int) bool { return changes[key][i].rv < changes[key][j].rv })
	}
	return changes
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
