package robustness

import "testing"

// Two deletes of unknown outcome on one key, then a read that finds it
// absent: legal (either delete may have taken effect). Porcupine could not
// place two operations returning at one instant at the end of time.
func TestWritesOfUnknownOutcomeNeverReturnAtOneInstant(t *testing.T) {
	h := History{Ops: []Op{
		{Client: 0, Input: Input{Op: OpCreate, Key: "k", Value: "a"}, Output: Output{Status: StatusOK, Value: "a", RV: 5}, Call: 1, Return: 2},
		{Client: 1, Input: Input{Op: OpDelete, Key: "k"}, Output: Output{Status: StatusUnknown}, Call: 3, Return: neverReturned},
		{Client: 2, Input: Input{Op: OpGet, Key: "k"}, Output: Output{Status: StatusOK, Value: "a", RV: 5}, Call: 4, Return: 5},
		{Client: 2, Input: Input{Op: OpUpdate, Key: "k", Value: "b", FromRV: 5}, Output: Output{Status: StatusOK, Value: "b", RV: 7}, Call: 6, Return: 7},
		{Client: 0, Input: Input{Op: OpDelete, Key: "k"}, Output: Output{Status: StatusUnknown}, Call: 8, Return: neverReturned},
		{Client: 3, Input: Input{Op: OpGet, Key: "k"}, Output: Output{Status: StatusNotFound}, Call: 9, Return: 10},
	}}
	if rep := Check(h, 0); len(rep.Violations) > 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	// The check can fail: the read finds a value no write wrote.
	h.Ops[len(h.Ops)-1].Output = Output{Status: StatusOK, Value: "z", RV: 9}
	if rep := Check(h, 0); len(rep.Violations) == 0 {
		t.Fatal("a read of a value never written passed")
	}
}

// A write answered 507 did not happen: a later read that finds the key as
// it was is legal, and one that finds the refused write's value is not
// (a write done and then refused).
func TestARefusedWriteDidNotHappen(t *testing.T) {
	h := History{Ops: []Op{
		{Client: 0, Input: Input{Op: OpCreate, Key: "k", Value: "a"}, Output: Output{Status: StatusOK, Value: "a", RV: 5}, Call: 1, Return: 2},
		{Client: 1, Input: Input{Op: OpUpdate, Key: "k", Value: "b", FromRV: 5}, Output: Output{Status: StatusRefused, Code: 507, Reason: "InsufficientStorage"}, Call: 3, Return: 4},
		{Client: 1, Input: Input{Op: OpCreate, Key: "j", Value: "c"}, Output: Output{Status: StatusRefused, Code: 507, Reason: "InsufficientStorage"}, Call: 3, Return: 4},
		{Client: 2, Input: Input{Op: OpGet, Key: "k"}, Output: Output{Status: StatusOK, Value: "a", RV: 5}, Call: 5, Return: 6},
		{Client: 2, Input: Input{Op: OpGet, Key: "j"}, Output: Output{Status: StatusNotFound}, Call: 5, Return: 6},
	}}
	rep := Check(h, 0)
	if len(rep.Violations) > 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	if rep.Refused != 2 || rep.Writes != 3 {
		t.Errorf("%d refused of %d writes, want 2 of 3", rep.Refused, rep.Writes)
	}
	h.Ops[3].Output = Output{Status: StatusOK, Value: "b", RV: 7}
	if rep := Check(h, 0); len(rep.Violations) == 0 || rep.Violations[0].Check != "linearizability" {
		t.Fatalf("a read of a refused update's value: %v, want a linearizability violation", rep.Violations)
	}
}
