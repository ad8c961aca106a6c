package main

import (
	"testing"

	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		cmdline   string
		want      flags
		wantNotes int
	}{
		{"console=ttyS0", flags{logSeverity: logtree.INFO}, 0},
		{"cairn.log=warning", flags{logSeverity: logtree.WARNING}, 0},
		{"cairn.log=E", flags{logSeverity: logtree.ERROR}, 0},
		{"cairn.log=loud", flags{logSeverity: logtree.INFO}, 1},
	} {
		got, notes := parseFlags(cmdline.Parse(tc.cmdline))
		if got.logSeverity != tc.want.logSeverity || len(notes) != tc.wantNotes {
			t.Errorf("parseFlags(%q) = %+v, %q, want %+v and %d notes", tc.cmdline, got, notes, tc.want, tc.wantNotes)
		}
	}
}
