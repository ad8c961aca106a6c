//go:build !cairntest

package testhooks

import (
	"context"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/cmdline"
)

// TestProductionIgnoresTestFlags checks that the production build reads
// no test flag and names them all in one note.
func TestProductionIgnoresTestFlags(t *testing.T) {
	f, notes := Parse(cmdline.Parse("cairn.test.root-fail cairn.test.echo=7900 cairn.test.storage_keys=ab:cd cairn.log=warning"))
	if len(notes) != 1 {
		t.Fatalf("Parse(test flags) = %+v, %q, want one note", f, notes)
	}
	for _, want := range []string{"cairn.test.root-fail", "cairn.test.echo", "cairn.test.storage_keys", "production"} {
		if !strings.Contains(notes[0], want) {
			t.Errorf("note %q does not name %q", notes[0], want)
		}
	}
	if strings.Contains(notes[0], "cairn.log") {
		t.Errorf("note %q names cairn.log, which is no test flag", notes[0])
	}
	h := f.Storage(nil, "", "", nil)
	if f.RootFailure() != nil || len(f.Services(nil, "", nil)) != 0 || h.Run(context.Background(), nil) != nil {
		t.Errorf("the production build acts on test flags")
	}
	pid1 := cmdline.Parse("cairn.test.starve-watchdog cairn.test.hang-reboot")
	if StarveWatchdog(pid1) || HangReboot(pid1) {
		t.Errorf("the production build's PID 1 acts on its test flags")
	}
}
