package options

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestGCPercentFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		bad  bool
	}{
		{want: DefaultGCPercent},
		{args: []string{"--gogc=100"}, want: 100},
		{args: []string{"--gogc=10"}, want: 10},
		{args: []string{"--gogc=1000"}, want: 1000},
		{args: []string{"--gogc=0"}, bad: true},
		{args: []string{"--gogc=-1"}, bad: true},
		{args: []string{"--gogc=5000"}, bad: true},
	} {
		o := NewLimitOptions()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		errs := o.Validate()
		if tc.bad {
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), "--gogc must be between 10 and 1000") {
				t.Errorf("%v: Validate said %v, want one error naming --gogc's bounds", tc.args, errs)
			}
			continue
		}
		if len(errs) > 0 || o.GCPercent != tc.want {
			t.Errorf("%v: GCPercent %d, errors %v; want %d", tc.args, o.GCPercent, errs, tc.want)
		}
	}
}

// The process's collector follows --gogc unless GOGC is in the environment,
// as the runtime reads it at start and an operator who set it meant it.
func TestApplyGCPercentLeavesGOGCFromTheEnvironment(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	o := CompletedOptions{&completedOptions{Options: Options{Limits: NewLimitOptions()}}}
	o.Limits.GCPercent = 37

	t.Setenv("GOGC", "")
	if got, source := o.ApplyGCPercent(); got != 37 || source != "--gogc" {
		t.Errorf("without GOGC: %d from %s, want 37 from --gogc", got, source)
	}
	if now := debug.SetGCPercent(100); now != StartGCPercent {
		t.Errorf("the runtime's target while the server starts is %d, want %d", now, StartGCPercent)
	}
	SetGCPercentAtRest(37)
	if now := debug.SetGCPercent(100); now != 37 {
		t.Errorf("the runtime's target at rest is %d, want 37", now)
	}
	// A target at rest above the start's is kept from the start.
	o.Limits.GCPercent = 400
	o.ApplyGCPercent()
	if now := debug.SetGCPercent(100); now != 400 {
		t.Errorf("with --gogc=400 the start's target is %d, want 400", now)
	}
	o.Limits.GCPercent = 37

	t.Setenv("GOGC", "80")
	if got, source := o.ApplyGCPercent(); got != -1 || source != "GOGC=80 in the environment" {
		t.Errorf("with GOGC=80: %d from %s", got, source)
	}
	if now := debug.SetGCPercent(100); now != 100 {
		t.Errorf("with GOGC=80 the runtime's target changed to %d", now)
	}
	SetGCPercentAtRest(-1)
	if now := debug.SetGCPercent(100); now != 100 {
		t.Errorf("with GOGC=80 the target at rest changed the runtime's to %d", now)
	}
}
