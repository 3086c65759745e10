package robustness

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded operation: what a client asked, when, and what it was
// answered.
type Op struct {
	Client int    `json:"client"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	// Call and Return are nanoseconds since the history began; Return is
	// neverReturned for a write whose outcome is unknown.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
}

// WatchEvent is one event a watch delivered, or the watch's end.
type WatchEvent struct {
	// Session numbers the watch requests of one watcher in order; a
	// resumed watch starts a new session from the last revision seen.
	Session int `json:"session"`
	// FromRV is the revision the session's watch started from.
	FromRV int64  `json:"fromRV"`
	Type   string `json:"type"` // ADDED, MODIFIED, DELETED, BOOKMARK, or GONE (410: relisted)
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	RV     int64  `json:"rv"`
}

// History is everything a run recorded.
type History struct {
	Ops []Op `json:"ops"`
	// Watches holds each watcher's events.
	Watches [][]WatchEvent `json:"watches"`
	// Faults lists what was injected, for the report.
	Faults []string `json:"faults"`
	// StaleReads are the reads with resourceVersion=0 at mirrors.
	StaleReads []StaleRead `json:"staleReads,omitempty"`
	// ServerErrors are the 5xx answers the clients received (Answers).
	ServerErrors []ServerError `json:"serverErrors,omitempty"`
}

// Recorder collects a history from concurrent clients.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	h     History
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the history's clock.
func (r *Recorder) Now() int64 { return time.Since(r.start).Nanoseconds() }

// Record adds an operation; a write whose outcome is unknown never
// returned, as far as the history knows.
func (r *Recorder) Record(op Op) {
	if op.Output.Status == StatusUnknown {
		op.Return = neverReturned
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ops = append(r.h.Ops, op)
}

// moveClient is the client of the home moves in a history.
const moveClient = 1 << 20

// RecordMove adds the move of the partition's home, from call to ret, as
// an operation on every key (OpMove).
func (r *Recorder) RecordMove(keys []string, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.h.Ops = append(r.h.Ops, Op{Client: moveClient, Input: Input{Op: OpMove, Key: k}, Output: Output{Status: StatusOK}, Call: call, Return: ret})
	}
}

// RecordStale adds a stale read.
func (r *Recorder) RecordStale(read StaleRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.StaleReads = append(r.h.StaleReads, read)
}

// AddServerErrors adds the 5xx answers the clients received.
func (r *Recorder) AddServerErrors(errs []ServerError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.ServerErrors = append(r.h.ServerErrors, errs...)
}

// Fault records an injected fault.
func (r *Recorder) Fault(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, fmt.Sprintf("%s at %s", what, time.Since(r.start).Round(time.Millisecond)))
}

// AddWatch adds one watcher's events.
func (r *Recorder) AddWatch(events []WatchEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Watches = append(r.h.Watches, events)
}

// History returns what was recorded.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Ops = append([]Op(nil), r.h.Ops...)
	h.StaleReads = append([]StaleRead(nil), r.h.StaleReads...)
	h.ServerErrors = append([]ServerError(nil), r.h.ServerErrors...)
	sort.SliceStable(h.Ops, func(i, j int) bool { return h.Ops[i].Call < h.Ops[j].Call })
	return h
}

// Violation is one broken promise, named, with what shows it.
type Violation struct {
	Check   string `json:"check"` // "linearizability", "watch-order", "watch-duplicate", "watch-gap", "watch-content", "internal-error"
	Details string `json:"details"`
}

func (v Violation) String() string { return v.Check + ": " + v.Details }

// Report is the result of checking a history.
type Report struct {
	Operations int `json:"operations"`
	// Writes and Reads count the operations by kind; Unknown the writes
	// whose outcome the client did not learn; Refused those answered 507
	// (not done).
	Writes, Reads, Unknown, Refused int
	// MirrorReads counts the consistent reads answered by a cache other
	// than the one written through: a mirror in regions, a second server
	// on the same etcd when scaled out.
	MirrorReads int
	// StaleReads counts the reads with resourceVersion=0 at mirrors;
	// TimeTravelRefused those a reader's memory of home revisions (as
	// cache/client's) refused as older than what it had accepted.
	StaleReads, TimeTravelRefused int
	WatchEvents                   int
	Faults                        []string
	// UnknownErrors are the errors of the writes of unknown outcome.
	UnknownErrors []string
	// ServerErrors counts the 5xx answers the clients received by status
	// and reason ("503 ServiceUnavailable"); each 500 is also a violation.
	ServerErrors map[string]int
	Violations   []Violation
}

// Check checks a history against the models.
func Check(h History, timeout time.Duration) Report {
	rep := Report{Operations: len(h.Ops), Faults: h.Faults}
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	// A write that never returned returns after everything else, each at
	// an instant of its own: porcupine mis-judged two operations returning
	// at one far instant (neverReturned): a history with two deletes of
	// unknown outcome on a key, then a read finding it absent, was called
	// illegal among the other keys' operations.
	var end int64
	for _, op := range h.Ops {
		end = max(end, op.Call)
		if op.Return != neverReturned {
			end = max(end, op.Return)
		}
	}
	for _, op := range h.Ops {
		switch {
		case op.Input.Op == OpMove:
		case op.Input.Op == OpGet:
			rep.Reads++
			if op.Input.At > 0 {
				rep.MirrorReads++
			}
		case op.Output.Status == StatusUnknown:
			rep.Writes++
			rep.Unknown++
			rep.UnknownErrors = append(rep.UnknownErrors, op.Output.Error)
		case op.Output.Status == StatusRefused:
			rep.Writes++
			rep.Refused++
		default:
			rep.Writes++
		}
		ret := op.Return
		if ret == neverReturned {
			end++
			ret = end
		}
		ops = append(ops, porcupine.Operation{ClientId: op.Client, Input: op.Input, Output: op.Output, Call: op.Call, Return: ret})
	}
	blurMoves(ops)
	result, info := porcupine.CheckOperationsVerbose(Model.ToModel(), ops, timeout)
	switch result {
	case porcupine.Illegal:
		rep.Violations = append(rep.Violations, Violation{Check: "linearizability", Details: describeIllegal(info, ops)})
	case porcupine.Unknown:
		rep.Violations = append(rep.Violations, Violation{Check: "linearizability", Details: fmt.Sprintf("the checker did not finish within %s", timeout)})
	}
	for _, w := range h.Watches {
		rep.WatchEvents += len(w)
		rep.Violations = append(rep.Violations, checkWatch(w, h.Ops)...)
	}
	rep.StaleReads = len(h.StaleReads)
	for _, r := range h.StaleReads {
		if r.Refused != "" {
			rep.TimeTravelRefused++
		}
	}
	var internal []Violation
	rep.ServerErrors, internal = checkServerErrors(h.ServerErrors)
	rep.Violations = append(rep.Violations, internal...)
	rep.Violations = append(rep.Violations, checkStaleReads(h)...)
	rep.Violations = append(rep.Violations, checkTimeTravel(h)...)
	return rep
}

// blurMoves forgets the resourceVersion of every read of a key that
// overlaps a move of the key's home: until every cache has learnt the new
// claim, the old home still answers as the home, with its own revisions,
// and the new one with its own, in any order; the values are the same (the
// writes are held meanwhile), which the model still checks.
func blurMoves(ops []porcupine.Operation) {
	type window struct{ call, ret int64 }
	moves := map[string][]window{}
	for _, op := range ops {
		if in := op.Input.(Input); in.Op == OpMove {
			moves[in.Key] = append(moves[in.Key], window{op.Call, op.Return})
		}
	}
	for i, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Op != OpGet || out.Status != StatusOK {
			continue
		}
		for _, w := range moves[in.Key] {
			if op.Call <= w.ret && op.Return >= w.call {
				out.RV = unknownRV
				ops[i].Output = out
				break
			}
		}
	}
}

// describeIllegal names the key whose history has no linearization and its
// longest partial one.
func describeIllegal(info porcupine.LinearizationInfo, ops []porcupine.Operation) string {
	// The partitions come in Model.Partition's order; the illegal one is a
	// key whose longest partial order leaves operations out (a legal
	// key's covers all of them).
	perKey := map[string]int{}
	for _, op := range ops {
		perKey[op.Input.(Input).Key]++
	}
	for _, p := range info.PartialLinearizationsOperations() {
		if len(p) == 0 {
			continue
		}
		longest := p[0]
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == 0 {
			continue
		}
		key := longest[0].Input.(Input).Key
		if len(longest) >= perKey[key] {
			continue
		}
		desc := fmt.Sprintf("key %s: no order of its operations explains the answers; the longest order that does (%d of its %d): ", key, len(longest), perKey[key])
		for i, op := range longest {
			if i > 0 {
				desc += ", "
			}
			desc += Model.DescribeOperation(op.Input, op.Output)
		}
		return desc
	}
	return "no linearization"
}

// Save writes h as JSON to path.
func (h History) Save(path string) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// LoadHistory reads a history Save wrote.
func LoadHistory(path string) (History, error) {
	var h History
	data, err := os.ReadFile(path)
	if err != nil {
		return h, err
	}
	return h, json.Unmarshal(data, &h)
}
