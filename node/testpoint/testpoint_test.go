package testpoint

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, s := range Steps() {
		got, err := Parse(string(s))
		if got != s || err != nil {
			t.Errorf("Parse(%q) = %q, %v, want %q", s, got, err, s)
		}
	}
	for _, bad := range []string{"", "GPT-written", "sealed ", "marker"} {
		got, err := Parse(bad)
		if got != "" || err == nil {
			t.Errorf("Parse(%q) = %q, %v, want an error", bad, got, err)
			continue
		}
		// The error lists the steps, so that a typo on a command line is
		// easy to fix.
		if !strings.Contains(err.Error(), string(MkfsRunning)) {
			t.Errorf("Parse(%q) error %q does not list the steps", bad, err)
		}
	}
}

func TestStepsAreDistinctTokens(t *testing.T) {
	seen := map[Step]bool{}
	for _, s := range Steps() {
		if seen[s] {
			t.Errorf("step %q listed twice", s)
		}
		seen[s] = true
		// A step is a marker's field value and a kernel flag's value:
		// lowercase letters and dashes keep both plain.
		if strings.Trim(string(s), "abcdefghijklmnopqrstuvwxyz-") != "" {
			t.Errorf("step %q has characters other than lowercase letters and dashes", s)
		}
	}
	if len(seen) != 7 {
		t.Errorf("%d steps, want the 7 of the issue", len(seen))
	}
}
