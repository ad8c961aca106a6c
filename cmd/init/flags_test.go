package main

import (
	"net/netip"
	"strings"
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
		{"cairn.test.root-fail", flags{logSeverity: logtree.INFO, testRootFail: true}, 0},
		{"cairn.test.root_fail=1", flags{logSeverity: logtree.INFO, testRootFail: true}, 0},
		{"cairn.test.root-fail=0", flags{logSeverity: logtree.INFO}, 0},
	} {
		got, notes := parseFlags(cmdline.Parse(tc.cmdline))
		if got != tc.want || len(notes) != tc.wantNotes {
			t.Errorf("parseFlags(%q) = %+v, %q, want %+v and %d notes", tc.cmdline, got, notes, tc.want, tc.wantNotes)
		}
	}
}

func TestParseTestFlags(t *testing.T) {
	node, cluster := strings.Repeat("ab", 64), strings.Repeat("cd", 64)
	f, notes := parseFlags(cmdline.Parse("cairn.test.storage-keys=" + node + ":" + cluster +
		" cairn.test.echo=7900 cairn.test.marker=m1 cairn.test.dial=10.42.0.11:7900"))
	if len(notes) != 0 || !f.testStorageKeys || f.testNodeKey[0] != 0xab || f.testClusterKey[63] != 0xcd ||
		f.testEchoPort != 7900 || f.testMarker != "m1" || f.testDial != netip.MustParseAddrPort("10.42.0.11:7900") {
		t.Errorf("parseFlags(test flags) = %+v, %q", f, notes)
	}
	for _, bad := range []string{
		"cairn.test.storage-keys=" + node,
		"cairn.test.storage-keys=" + node + ":" + cluster[2:],
		"cairn.test.storage-keys=" + node + ":" + strings.Repeat("zz", 64),
		"cairn.test.echo=0",
		"cairn.test.echo=70000",
		"cairn.test.dial=10.42.0.11",
	} {
		f, notes := parseFlags(cmdline.Parse(bad))
		if len(notes) != 1 || f.testStorageKeys || f.testEchoPort != 0 || f.testDial.IsValid() {
			t.Errorf("parseFlags(%q) = %+v, %q, want the flag ignored with one note", bad, f, notes)
		}
		if strings.Contains(strings.Join(notes, ""), node) {
			t.Errorf("parseFlags(%q) notes %q quote the key", bad, notes)
		}
	}
}
