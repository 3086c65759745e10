package robustness

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"
)

// Operations on one key (an object in one partition), as a client sees
// them.
const (
	OpCreate = "create"
	OpUpdate = "update" // with the resourceVersion the writer read (optimistic concurrency)
	OpDelete = "delete"
	OpGet    = "get" // a consistent read (no resourceVersion)
	// OpMove is the partition's home moving to another cache: the key
	// keeps its existence and value, and its resourceVersion becomes one
	// of the new home's etcd, which the history learns from the next
	// answer.
	OpMove = "move"
)

// Answers, as the model distinguishes them.
const (
	StatusOK       = "ok"
	StatusExists   = "exists"   // 409 AlreadyExists
	StatusConflict = "conflict" // 409 Conflict: the resourceVersion was not the current one
	StatusNotFound = "notfound" // 404
	// StatusUnknown is a write whose outcome the client does not know (a
	// timeout, a dropped connection, a 5xx): it may or may not have taken
	// effect, at any time after its call.
	StatusUnknown = "unknown"
	// StatusRefused is a write answered 507 InsufficientStorage (a full
	// disk, etcd's quota): it did not happen. A write that was done and
	// then answered 507 is a write the history says did not happen, which
	// a later read shows.
	StatusRefused = "refused"
)

// Input is what a client asked.
type Input struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
	// FromRV is the resourceVersion an update names.
	FromRV int64 `json:"fromRV,omitempty"`
	// At is the cache a read went to (0: the home, 1...: mirrors); the
	// model ignores it.
	At int `json:"at,omitempty"`
}

// Output is what the cache answered.
type Output struct {
	Status string `json:"status"`
	Value  string `json:"value,omitempty"`
	// RV is the object's resourceVersion in the answer (writes and reads
	// that returned an object).
	RV int64 `json:"rv,omitempty"`
	// Error is the error of a write of unknown outcome, for the report; the
	// model ignores it.
	Error string `json:"error,omitempty"`
	// Code and Reason are the HTTP status and the Status reason of a
	// write's error answer, for the faults' own checks (a full disk's);
	// the model ignores them. Code 0: no answer from the cache (a
	// timeout, a connection lost).
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// state is one key's state in the model: absent, or present with a value
// and a resourceVersion (unknownRV after a write whose answer was lost).
type state struct {
	Exists bool
	Value  string
	RV     int64
}

const unknownRV = -1

// step returns every state the key can be in after op answered out in s;
// none when the answer is impossible.
func step(s state, in Input, out Output) []state {
	if out.Status == StatusRefused && in.Op != OpGet {
		return []state{s}
	}
	switch in.Op {
	case OpCreate:
		switch out.Status {
		case StatusOK:
			if !s.Exists && out.RV > 0 {
				return []state{{true, in.Value, out.RV}}
			}
		case StatusExists:
			if s.Exists {
				return []state{s}
			}
		case StatusUnknown:
			if !s.Exists {
				return []state{s, {true, in.Value, unknownRV}}
			}
			return []state{s}
		}
	case OpUpdate:
		current := s.Exists && (s.RV == in.FromRV || s.RV == unknownRV)
		switch out.Status {
		case StatusOK:
			if current && out.RV > 0 {
				return []state{{true, in.Value, out.RV}}
			}
		case StatusConflict:
			if s.Exists && (s.RV != in.FromRV || s.RV == unknownRV) {
				return []state{s}
			}
		case StatusNotFound:
			if !s.Exists {
				return []state{s}
			}
		case StatusUnknown:
			if current {
				return []state{s, {true, in.Value, unknownRV}}
			}
			return []state{s}
		}
	case OpDelete:
		switch out.Status {
		case StatusOK:
			if s.Exists {
				return []state{{}}
			}
		case StatusNotFound:
			if !s.Exists {
				return []state{s}
			}
		case StatusUnknown:
			if s.Exists {
				return []state{s, {}}
			}
			return []state{s}
		}
	case OpMove:
		if out.Status == StatusOK {
			if !s.Exists {
				return []state{s}
			}
			return []state{{true, s.Value, unknownRV}}
		}
	case OpGet:
		switch out.Status {
		case StatusOK:
			if out.RV == unknownRV && s.Exists && s.Value == out.Value {
				// A read during a home move (blurMoves): either home's.
				return []state{s}
			}
			if s.Exists && s.Value == out.Value && (s.RV == out.RV || s.RV == unknownRV) {
				return []state{{true, s.Value, out.RV}}
			}
		case StatusNotFound:
			if !s.Exists {
				return []state{s}
			}
		}
	}
	return nil
}

// Model is the porcupine model of the cache's objects: one register per
// key, partitioned by key.
var Model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{state{}} },
	Step: func(s, in, out interface{}) []interface{} {
		next := step(s.(state), in.(Input), out.(Output))
		states := make([]interface{}, len(next))
		for i, n := range next {
			states[i] = n
		}
		return states
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(Input), out.(Output)
		return fmt.Sprintf("%s(%s %s from %d) -> %s %s@%d", i.Op, i.Key, i.Value, i.FromRV, o.Status, o.Value, o.RV)
	},
}

// neverReturned is the return time of an operation whose outcome is
// unknown: it may take effect at any time after its call.
const neverReturned = math.MaxInt64
