package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table.
type row struct {
	ID       string `json:"id"`
	Metric   string `json:"metric"`
	Cache    string `json:"cache"`
	Baseline string `json:"baseline"`
	// CacheValue and BaselineValue are the numbers the ratio is made of, in
	// Unit (objects/s, seconds, or bytes).
	CacheValue    float64 `json:"cache_value"`
	BaselineValue float64 `json:"baseline_value"`
	Unit          string  `json:"unit"`
	Ratio         float64 `json:"ratio"` // CacheValue / BaselineValue; NaN (null in JSON) when not applicable
	RatioMeaning  string  `json:"ratio_meaning,omitempty"`
	Target        *target `json:"target,omitempty"`
	// TargetOnValue checks the target against CacheValue instead of Ratio.
	TargetOnValue bool  `json:"target_on_value,omitempty"`
	Met           *bool `json:"met,omitempty"`
	// Indicative is set when the run's sizes differ from the target's
	// conditions (for example in -quick mode).
	Indicative bool                   `json:"indicative,omitempty"`
	Note       string                 `json:"note,omitempty"`
	Details    map[string]interface{} `json:"details,omitempty"`
}

// MarshalJSON writes NaN ratios as null.
func (r row) MarshalJSON() ([]byte, error) {
	type plain row
	out := struct {
		plain
		Ratio *float64 `json:"ratio"`
	}{plain: plain(r)}
	if !math.IsNaN(r.Ratio) && !math.IsInf(r.Ratio, 0) {
		v := r.Ratio
		out.Ratio = &v
	}
	return json.Marshal(out)
}

// cells renders a row's ratio, target and verdict for a table; none
// stands for a missing ratio or target, noVerdict for a row without one.
func (x *row) cells(none, noVerdict string) (ratio, tgt, met string) {
	ratio, tgt, met = none, none, noVerdict
	if !math.IsNaN(x.Ratio) && !math.IsInf(x.Ratio, 0) {
		ratio = fmt.Sprintf("%.2f", x.Ratio)
	}
	if x.Target != nil {
		tgt = x.Target.Text
	}
	if x.Met != nil {
		met = "no"
		if *x.Met {
			met = "yes"
		}
		if x.Indicative {
			met += " (indicative)"
		}
	}
	return ratio, tgt, met
}

func (r *row) evaluate() {
	if r.Target == nil {
		return
	}
	v := r.Ratio
	if r.TargetOnValue {
		v = r.CacheValue
	}
	met := r.Target.met(v)
	r.Met = &met
}

// report is everything a run prints.
type report struct {
	Command     string                 `json:"command"`
	Parameters  map[string]interface{} `json:"parameters"`
	Environment map[string]interface{} `json:"environment"`
	Rows        []*row                 `json:"rows"`
	Memory      map[string]interface{} `json:"memory,omitempty"`
	Notes       []string               `json:"notes,omitempty"`
	Errors      []string               `json:"errors,omitempty"`
}

func (r *report) add(x *row) {
	x.evaluate()
	r.Rows = append(r.Rows, x)
}

func (r *report) note(format string, args ...interface{}) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// sortRows orders the rows by ID (1a, 1b, 2a, ..., 9d, 10a), the order of
// the issue: by the ID's number, then by its letters.
func (r *report) sortRows() {
	sort.SliceStable(r.Rows, func(i, j int) bool { return rowIDLess(r.Rows[i].ID, r.Rows[j].ID) })
}

// rowIDLess orders IDs such as "9d" and "10a" by their leading number
// first, so that 10a follows 9d.
func rowIDLess(a, b string) bool {
	na, ra, sa := splitRowID(a)
	nb, rb, sb := splitRowID(b)
	if na != nb {
		return na < nb
	}
	if sa != sb {
		return sa < sb
	}
	return ra < rb
}

// splitRowID splits "11d-50000" into 11, "d" and 50000: the scale phase's
// rows carry the size they measured, and read best size by size. A row
// without a size sorts after those with one.
func splitRowID(id string) (number int, letters string, size int) {
	digits := len(id) - len(strings.TrimLeft(id, "0123456789"))
	number, _ = strconv.Atoi(id[:digits])
	letters, sizeText, ok := strings.Cut(id[digits:], "-")
	size = math.MaxInt
	if n, err := strconv.Atoi(sizeText); ok && err == nil {
		size = n
	}
	return number, letters, size
}

func (r *report) writeJSON(w io.Writer) error {
	r.sortRows()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeMarkdown writes what docs/performance.md shows of a run: the
// command, the machine, and the table, each row with its ratio's meaning
// and note below it.
func (r *report) writeMarkdown(w io.Writer) error {
	r.sortRows()
	fmt.Fprintf(w, "`%s` on %v:\n\n", r.Command, r.Environment["machine"])
	fmt.Fprintln(w, "| # | measurement | cache | baseline (same run) | ratio | target | met |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, x := range r.Rows {
		ratio, tgt, met := x.cells("–", "")
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", x.ID, mdCell(x.Metric), mdCell(x.Cache), mdCell(x.Baseline), ratio, mdCell(tgt), met)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratio = cache ÷ baseline (throughput: higher is better; latency and memory: lower is better).")
	for _, x := range r.Rows {
		if x.RatioMeaning == "" && x.Note == "" {
			continue
		}
		text := x.RatioMeaning
		if x.Note != "" {
			if text != "" {
				text += "; "
			}
			text += x.Note
		}
		fmt.Fprintf(w, "- %s: %s\n", x.ID, mdCell(text))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- note: %s\n", mdCell(n))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "- error: %s\n", mdCell(e))
	}
	return nil
}

// mdCell makes s fit one Markdown table cell or list item: one line, no
// leading indentation, pipes escaped.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}

func (r *report) writeTable(w io.Writer) error {
	r.sortRows()
	fmt.Fprintf(w, "%s\n", r.Command)
	for _, k := range sortedKeys(r.Environment) {
		if _, isMap := r.Environment[k].(map[string]interface{}); isMap {
			continue // listed in the notes
		}
		fmt.Fprintf(w, "  %s: %v\n", k, r.Environment[k])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tmeasurement\tcache\tbaseline\tratio\ttarget\tmet")
	for _, x := range r.Rows {
		ratio, tgt, met := x.cells("-", "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Metric, x.Cache, x.Baseline, ratio, tgt, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ratio = cache ÷ baseline (throughput: higher is better; latency and memory: lower is better)")
	for _, x := range r.Rows {
		if x.RatioMeaning != "" || x.Note != "" {
			fmt.Fprintf(w, "  %-4s %s", x.ID, x.RatioMeaning)
			if x.Note != "" {
				if x.RatioMeaning != "" {
					fmt.Fprint(w, "; ")
				}
				fmt.Fprint(w, x.Note)
			}
			fmt.Fprintln(w)
		}
	}
	if r.Memory != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "heap growth while loading, by origin (sampled heap profile, estimates):")
		if origins, ok := r.Memory["growth_by_origin_per_object"].([]siteDelta); ok {
			for _, o := range origins {
				fmt.Fprintf(w, "  %8.0f B/object  %s\n", o.Bytes, o.Site)
			}
		}
		if sites, ok := r.Memory["top_growth_sites_per_object"].([]siteDelta); ok {
			fmt.Fprintln(w, "top allocation sites:")
			for _, o := range sites {
				fmt.Fprintf(w, "  %8.0f B/object  %s\n", o.Bytes, o.Site)
			}
		}
		if sites, ok := r.Memory["churn_growth_sites_per_object"].([]siteDelta); ok {
			fmt.Fprintln(w, "heap growth from the churn peak to after deleting and idling, by allocation site:")
			for _, o := range sites {
				fmt.Fprintf(w, "  %8.0f B/object  %s\n", o.Bytes, o.Site)
			}
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "notes:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", n)
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "errors:")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// p50p99 renders a latency summary compactly.
func p50p99(s summary) string {
	return fmt.Sprintf("p50 %s / p99 %s", ms(s.P50), ms(s.P99))
}

func sortedKeys(m map[string]interface{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
