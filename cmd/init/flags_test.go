package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/verity"
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

var testParams = verity.Params{
	RootHash: bytes.Repeat([]byte{0xab}, verity.DigestSize), Salt: []byte{1, 2},
	DataBlocks: 130, HashOffset: 130 * verity.BlockSize,
}

// buildCmdline is a command line as the image build writes it: the
// verity parameters, no slot. build/system's TestCmdline pins the same
// form on the writer's side.
var buildCmdline = "console=ttyS0 cairn.verity=" + testParams.String()

// TestParseSystemFlags reads what the image build writes, a slot forced
// as tests do, and names what is missing or wrong.
func TestParseSystemFlags(t *testing.T) {
	for line, want := range map[string]localstorage.Slot{
		buildCmdline:                     "",
		buildCmdline + " cairn.system=a": localstorage.SlotA,
		"cairn.system=b " + buildCmdline: localstorage.SlotB,
	} {
		got := parseSystemFlags(cmdline.Parse(line))
		if got.err != nil || got.slot != want || !cmp.Equal(got.verity, testParams) {
			t.Errorf("parseSystemFlags(%q) = %+v, want slot %q and %+v", line, got, want, testParams)
		}
	}
	for line, want := range map[string]string{
		"console=ttyS0":                   "no cairn.verity",
		"cairn.system=a":                  "no cairn.verity",
		buildCmdline + " cairn.system=c":  "cairn.system",
		buildCmdline + " cairn.system=":   "cairn.system",
		"cairn.verity=00,,1,4096":         "cairn.verity",
		"cairn.system=a cairn.verity=zz,": "cairn.verity",
	} {
		if got := parseSystemFlags(cmdline.Parse(line)); got.err == nil || !strings.Contains(got.err.Error(), want) {
			t.Errorf("parseSystemFlags(%q) error = %v, want one naming %q", line, got.err, want)
		}
	}
}
