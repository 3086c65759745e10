package robustness

import (
	"slices"
	"testing"
	"time"
)

// The time-travel check on histories written by hand: a reader that goes
// back is named, one that moves forward (or whose refusal kept it from
// going back) is not, and readers are judged apart.
func TestTimeTravelCheck(t *testing.T) {
	sec := func(s float64) int64 { return int64(s * float64(time.Second)) }
	// k0 created at 10 ("a"), updated at 20 ("b"), deleted at 40; a watch
	// of the home saw all of it from 5 to 50.
	base := History{
		Ops: []Op{
			{Input: Input{Op: OpCreate, Key: "k0", Value: "a"}, Output: Output{Status: StatusOK, Value: "a", RV: 10}, Call: sec(0.9), Return: sec(1)},
			{Input: Input{Op: OpUpdate, Key: "k0", Value: "b", FromRV: 10}, Output: Output{Status: StatusOK, Value: "b", RV: 20}, Call: sec(1.9), Return: sec(2)},
			{Input: Input{Op: OpDelete, Key: "k0"}, Output: Output{Status: StatusOK}, Call: sec(3.9), Return: sec(4)},
		},
		Watches: [][]WatchEvent{{
			{Session: 0, FromRV: 5, Type: "ADDED", Key: "k0", Value: "a", RV: 10},
			{Session: 0, FromRV: 5, Type: "MODIFIED", Key: "k0", Value: "b", RV: 20},
			{Session: 0, FromRV: 5, Type: "DELETED", Key: "k0", Value: "b", RV: 40},
			{Session: 0, FromRV: 5, Type: "BOOKMARK", RV: 50},
		}},
	}
	ok := func(reader int, value string, rv int64, call float64) StaleRead {
		return StaleRead{Key: "k0", At: 1, Reader: reader, Call: sec(call), Return: sec(call + 0.01), Status: StatusOK, Value: value, RV: rv}
	}
	absent := func(reader int, header int64, call float64) StaleRead {
		return StaleRead{Key: "k0", At: 2, Reader: reader, Call: sec(call), Return: sec(call + 0.01), Status: StatusNotFound, HomeRevision: header}
	}
	refused := func(reader int, call float64) StaleRead {
		return StaleRead{Key: "k0", At: 2, Reader: reader, Call: sec(call), Return: sec(call + 0.01), Refused: "time travel"}
	}
	for _, tc := range []struct {
		name  string
		reads []StaleRead
		want  bool
	}{
		{"forward", []StaleRead{ok(1, "a", 10, 1.5), ok(1, "b", 20, 2.5)}, false},
		{"back to an update's predecessor", []StaleRead{ok(1, "b", 20, 2.5), ok(1, "a", 10, 2.6)}, true},
		{"back after a deletion", []StaleRead{ok(1, "b", 20, 2.5), absent(1, 45, 4.5), ok(1, "b", 20, 4.6)}, true},
		{"absent before the creation, then the object", []StaleRead{absent(1, 5, 0.5), ok(1, "a", 10, 1.5)}, false},
		{"the object, then absent as before its creation", []StaleRead{ok(1, "a", 10, 1.5), absent(1, 5, 1.6)}, true},
		{"the object, then its deletion", []StaleRead{ok(1, "b", 20, 2.5), absent(1, 45, 4.5), absent(1, 40, 4.6)}, false},
		{"refused instead of going back", []StaleRead{ok(1, "b", 20, 2.5), refused(1, 2.6), ok(1, "b", 20, 2.7)}, false},
		{"two readers, each forward", []StaleRead{ok(1, "b", 20, 2.5), ok(2, "a", 10, 2.6)}, false},
		{"the same state again", []StaleRead{ok(1, "b", 20, 2.5), ok(1, "b", 20, 3)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := base
			h.StaleReads = slices.Clone(tc.reads)
			violations := checkTimeTravel(h)
			if got := len(violations) > 0; got != tc.want {
				t.Errorf("violations %v, want time travel: %t", violations, tc.want)
			}
			for _, v := range violations {
				if v.Check != "time-travel" {
					t.Errorf("violation %v, want time-travel", v)
				}
			}
		})
	}
}
