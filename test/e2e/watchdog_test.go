//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch"
)

// TestWatchdogResetsHungReboot: a machine whose kernel hangs on its way
// down is reset by the hardware watchdog, which PID 1 armed and the
// kernel leaves running through a reboot (node/modules loads the watchdog
// core with stop_on_reboot=0). The test image boots with
// cairn.test.hang-reboot: once PID 1 armed qemu's i6300esb, it asks for a
// reboot and ends it by halting the kernel instead of restarting the
// machine. The machine must boot again, by the watchdog alone.
func TestWatchdogResetsHungReboot(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	n := s.launchTestImage("hang", "cairn.test.hang-reboot")

	armed := s.waitFor(n, launch.Substring("cairn: watchdog armed"))
	if !strings.Contains(armed.Text, "and when a reboot hangs") {
		t.Errorf("PID 1 armed the watchdog, but the kernel stops it in a reboot: %q", armed.Text)
	}
	halting := s.waitFrom(n, armed.Index, launch.Substring("cairn: test hook: halting the kernel"))
	halted := s.waitFrom(n, halting.Index, launch.Substring("reboot: System halted"))
	s.step("watchdog armed → kernel halted", halted.Time.Sub(armed.Time))
	again := s.waitFrom(n, halted.Index, launch.CairnBoot.Kernel)
	s.step("kernel halted → reset by the watchdog, kernel started again", again.Time.Sub(halted.Time))
	s.waitFrom(n, again.Index, launch.CairnBoot.Init)
	assertNoPanic(t, n)
}
