//go:build cairntest

package testhooks

import (
	"net/netip"
	"strings"
	"testing"

	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/cmdline"
)

func TestParseRootFail(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"cairn.test.root-fail", true},
		{"cairn.test.root_fail=1", true},
		{"cairn.test.root-fail=0", false},
		{"console=ttyS0", false},
	} {
		got, notes := Parse(cmdline.Parse(tc.cmdline))
		if got.rootFail != tc.want || len(notes) != 0 {
			t.Errorf("Parse(%q) root-fail = %v, %q, want %v and no notes", tc.cmdline, got.rootFail, notes, tc.want)
		}
	}
}

func TestParseTestFlags(t *testing.T) {
	node, cluster := strings.Repeat("ab", 64), strings.Repeat("cd", 64)
	f, notes := Parse(cmdline.Parse("cairn.test.storage-keys=" + node + ":" + cluster +
		" cairn.test.echo=7900 cairn.test.marker=m1 cairn.test.dial=10.42.0.11:7900 cairn.test.stop_at=mkfs-running"))
	if len(notes) != 0 || !f.storageKeys || f.nodeKey[0] != 0xab || f.clusterKey[63] != 0xcd ||
		f.echoPort != 7900 || f.marker != "m1" || f.dial != netip.MustParseAddrPort("10.42.0.11:7900") ||
		f.stopAt != testpoint.MkfsRunning {
		t.Errorf("Parse(test flags) = %+v, %q", f, notes)
	}
	for _, bad := range []string{
		"cairn.test.storage-keys=" + node,
		"cairn.test.storage-keys=" + node + ":" + cluster[2:],
		"cairn.test.storage-keys=" + node + ":" + strings.Repeat("zz", 64),
		"cairn.test.echo=0",
		"cairn.test.echo=70000",
		"cairn.test.dial=10.42.0.11",
		"cairn.test.stop-at=nowhere",
		"cairn.test.stop-at",
	} {
		f, notes := Parse(cmdline.Parse(bad))
		if len(notes) != 1 || f.storageKeys || f.echoPort != 0 || f.dial.IsValid() || f.stopAt != "" {
			t.Errorf("Parse(%q) = %+v, %q, want the flag ignored with one note", bad, f, notes)
		}
		if strings.Contains(strings.Join(notes, ""), node) {
			t.Errorf("Parse(%q) notes %q quote the key", bad, notes)
		}
	}
}

func TestParseUnsealAgain(t *testing.T) {
	for cl, want := range map[string]bool{
		"cairn.test.unseal-again":   true,
		"cairn.test.unseal-again=0": false,
		"console=ttyS0":             false,
	} {
		f, notes := Parse(cmdline.Parse(cl))
		if f.unsealAgain != want || len(notes) != 0 {
			t.Errorf("Parse(%q) unseal-again = %v, %q, want %v and no notes", cl, f.unsealAgain, notes, want)
		}
		if got := len(f.Services(nil, "", nil)); got != map[bool]int{true: 1, false: 0}[want] {
			t.Errorf("Parse(%q).Services() are %d, want the second unseal only when the flag is on", cl, got)
		}
	}
}

func TestParseHoldCuratorPort(t *testing.T) {
	for cl, want := range map[string]bool{
		"cairn.test.hold-curator-port":   true,
		"cairn.test.hold_curator_port=1": true,
		"cairn.test.hold-curator-port=0": false,
		"console=ttyS0":                  false,
	} {
		f, notes := Parse(cmdline.Parse(cl))
		if f.holdCuratorPort != want || len(notes) != 0 {
			t.Errorf("Parse(%q) hold-curator-port = %v, %q, want %v and no notes", cl, f.holdCuratorPort, notes, want)
		}
		if got := len(f.Services(nil, "", nil)); got != map[bool]int{true: 1, false: 0}[want] {
			t.Errorf("Parse(%q).Services() are %d, want the holder only when the flag is on", cl, got)
		}
	}
}

func TestPID1Flags(t *testing.T) {
	for cl, want := range map[string][2]bool{
		"cairn.test.starve-watchdog":                        {true, false},
		"cairn.test.hang-reboot":                            {false, true},
		"cairn.test.hang_reboot cairn.test.starve-watchdog": {true, true},
		"console=ttyS0":                                     {false, false},
	} {
		c := cmdline.Parse(cl)
		if got := [2]bool{StarveWatchdog(c), HangReboot(c)}; got != want {
			t.Errorf("%q: StarveWatchdog, HangReboot = %v, want %v", cl, got, want)
		}
	}
}
