package cache

import (
	"fmt"
	"sort"
	"testing"
)

// FuzzParseHomeRevisions: a Kcp-Cache-Home-Revision value from any peer or
// proxy parses or is refused, never panics; what parses formats back to a
// value that parses to the same entries, and no revision is negative.
func FuzzParseHomeRevisions(f *testing.F) {
	for _, v := range []string{
		"east=4f2a/120",
		"east=4f2a/120, west=9c1b/7",
		"a=b=c/1",
		"east=e/with/slashes/5",
		"east=/0",
		"east=e/-1",
		"east=e/99999999999999999999",
		"east",
		" , ,",
		"",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, value string) {
		entries, err := ParseHomeRevisions(value)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Revision < 0 {
				t.Fatalf("%q parsed a negative revision: %+v", value, e)
			}
		}
		again, err := ParseHomeRevisions(FormatHomeRevisions(entries))
		if err != nil {
			t.Fatalf("%q -> %+v formats to %q, which does not parse: %v", value, entries, FormatHomeRevisions(entries), err)
		}
		if a, b := sortedEntries(entries), sortedEntries(again); a != b {
			t.Fatalf("%q -> %s; formatted and parsed again -> %s", value, a, b)
		}
	})
}

func sortedEntries(entries []HomeRevision) string {
	s := make([]string, 0, len(entries))
	for _, e := range entries {
		s = append(s, fmt.Sprintf("%q %q %d", e.Home, e.Epoch, e.Revision))
	}
	sort.Strings(s)
	return fmt.Sprint(s)
}
