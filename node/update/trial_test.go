package update_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/node/update/updatetest"
	"cairn.dev/cairn/pkg/efivar"
	"cairn.dev/cairn/proto/private"
)

// stage installs a release of version into slot b of n.
func stage(t *testing.T, n *updatetest.Node, i *update.Installer, version string) {
	t.Helper()
	r := n.Push(t, version)
	if _, err := i.Install(context.Background(), update.Request{Reference: r.Reference}, func(update.Progress) {}); err != nil {
		t.Fatalf("Install of %s: %v", version, err)
	}
}

// entryOf returns the number of the boot entry that boots slot's UKI.
func entryOf(t *testing.T, n *updatetest.Node, slot localstorage.Slot) uint16 {
	t.Helper()
	p := efivar.DevicePath{efivar.FilePath{Path: `\EFI\cairn\system-` + string(slot) + ".efi"}}
	num, found, err := efivar.BootEntryFor(n.Vars, p)
	if err != nil || !found {
		t.Fatalf("no boot entry for slot %s: %v", slot, err)
	}
	return num
}

// healthy is a node that is healthy.
func healthy() update.HealthWait {
	return func(context.Context) (string, bool) { return "", true }
}

// stateOf is slot's recorded state in n.
func stateOf(t *testing.T, n *updatetest.Node, slot localstorage.Slot) *private.SystemSlots_Slot {
	t.Helper()
	rec := n.Record(t)
	if slot == localstorage.SlotB {
		return rec.GetB()
	}
	return rec.GetA()
}

// TestTrialProvesItself stages a release, activates it (BootNext names
// slot b, BootOrder is left alone), boots slot b healthy: b becomes the
// default, its UKI goes to the removable media path, and both slots are
// good. Rolling back then makes a the default again.
func TestTrialProvesItself(t *testing.T) {
	n := updatetest.New(t)
	stage(t, n, n.Installer, newer)
	if _, err := n.Installer.Activate(time.Minute); err != nil {
		t.Fatalf("Activate: %v", err)
	}
	b := entryOf(t, n, localstorage.SlotB)
	if next, err := efivar.ReadBootNext(n.Vars); err != nil || next != b {
		t.Fatalf("BootNext = %04X, %v; want slot b's entry %04X", next, err, b)
	}
	if _, err := efivar.ReadBootOrder(n.Vars); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Activate wrote BootOrder (%v): the default must stay the running slot", err)
	}
	if s := stateOf(t, n, localstorage.SlotB); s.GetState() != private.SystemSlots_Slot_TRIAL || s.GetTrialDeadlineMillis() != 60000 {
		t.Errorf("slot b recorded %v, want TRIAL with a deadline of 60000 ms", s)
	}
	if s := stateOf(t, n, localstorage.SlotA); s.GetState() != private.SystemSlots_Slot_GOOD || s.GetVersion() != updatetest.Running {
		t.Errorf("slot a recorded %v, want GOOD at %s", s, updatetest.Running)
	}

	// The firmware boots slot b once.
	onB := n.Boot(t, localstorage.SlotB, newer)
	if _, err := onB.Install(context.Background(), update.Request{Reference: "x/y:z"}, func(update.Progress) {}); !errors.Is(err, update.ErrOnTrial) {
		t.Errorf("Install during the trial: %v, want ErrOnTrial", err)
	}
	var said []string
	say := func(f string, a ...any) { said = append(said, f) }
	v, err := onB.JudgeBoot(context.Background(), healthy(), func() { t.Error("a healthy trial rebooted") }, say)
	if err != nil || !v.Proved || v.RolledBack != "" {
		t.Fatalf("JudgeBoot = %+v, %v; want proved", v, err)
	}
	if order, err := efivar.ReadBootOrder(n.Vars); err != nil || len(order) == 0 || order[0] != b {
		t.Errorf("BootOrder = %04X, %v; want slot b's entry %04X first", order, err, b)
	}
	uki, err := os.ReadFile(n.Storage.Root.ESP.EFI.Boot.BootX64.FullPath())
	if err != nil || !strings.Contains(string(uki), newer) {
		t.Errorf("the removable media path holds %q (%v), want slot b's UKI", uki, err)
	}
	slots, err := onB.Slots()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.State != private.SystemSlots_Slot_GOOD {
			t.Errorf("slot %s is %v after the trial, want GOOD", s.Slot, s.State)
		}
	}

	// The owner rolls back: a is the default again, b behind it.
	if _, err := onB.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	a := entryOf(t, n, localstorage.SlotA)
	if order, err := efivar.ReadBootOrder(n.Vars); err != nil || len(order) < 2 || order[0] != a || order[1] != b {
		t.Errorf("BootOrder after the rollback = %04X, %v; want a's %04X then b's %04X", order, err, a, b)
	}
	if uki, _ := os.ReadFile(n.Storage.Root.ESP.EFI.Boot.BootX64.FullPath()); !strings.Contains(string(uki), updatetest.Running) {
		t.Errorf("the removable media path holds %q after the rollback, want slot a's UKI", uki)
	}
}

// TestTrialFallsBack: the trial boot never reports (a panic, a hang, a
// power cut) and the firmware's default boots slot a again, which
// records b bad and says why; the update can then be tried again.
func TestTrialFallsBack(t *testing.T) {
	n := updatetest.New(t)
	stage(t, n, n.Installer, newer)
	if _, err := n.Installer.Activate(0); err != nil {
		t.Fatalf("Activate: %v", err)
	}
	if s := stateOf(t, n, localstorage.SlotB); s.GetTrialDeadlineMillis() != update.DefaultTrialDeadline.Milliseconds() {
		t.Errorf("slot b's deadline is %d ms, want the default", s.GetTrialDeadlineMillis())
	}
	onA := n.Boot(t, localstorage.SlotA, updatetest.Running)
	var said []string
	v, err := onA.JudgeBoot(context.Background(), healthy(), func() { t.Error("the last good slot rebooted") }, func(f string, a ...any) {
		said = append(said, f)
	})
	if err != nil || v.Proved {
		t.Fatalf("JudgeBoot = %+v, %v", v, err)
	}
	if want := "rolled back from " + newer + ": its trial boot ended before it was healthy"; !strings.HasPrefix(v.RolledBack, want) {
		t.Errorf("JudgeBoot said %q, want it to start %q", v.RolledBack, want)
	}
	if s := stateOf(t, n, localstorage.SlotB); s.GetState() != private.SystemSlots_Slot_BAD || s.GetReason() == "" {
		t.Errorf("slot b recorded %v, want BAD with a reason", s)
	}
	if _, err := onA.Rollback(); !errors.Is(err, update.ErrNotGood) {
		t.Errorf("Rollback to a bad slot: %v, want ErrNotGood", err)
	}
	if _, err := onA.Activate(0); !errors.Is(err, update.ErrNotStaged) {
		t.Errorf("Activate of a bad slot: %v, want ErrNotStaged", err)
	}
	// Tried again: the bad slot is written over and staged.
	stage(t, n, onA, newer)
	if _, err := onA.Activate(0); err != nil {
		t.Errorf("Activate after installing again: %v", err)
	}
}

// TestTrialMissesDeadline: the trial boot never becomes healthy; it
// records why, reboots, and the last good slot records it bad with that
// reason.
func TestTrialMissesDeadline(t *testing.T) {
	n := updatetest.New(t)
	stage(t, n, n.Installer, newer)
	if _, err := n.Installer.Activate(50 * time.Millisecond); err != nil {
		t.Fatalf("Activate: %v", err)
	}
	// A node that never gets its roles.
	unhealthy := func(ctx context.Context) (string, bool) {
		<-ctx.Done()
		return "its roles", false
	}
	rebooted := false
	onB := n.Boot(t, localstorage.SlotB, newer)
	if _, err := onB.JudgeBoot(context.Background(), unhealthy, func() { rebooted = true }, func(string, ...any) {}); err != nil {
		t.Fatalf("JudgeBoot: %v", err)
	}
	const reason = "not healthy within 50ms: waiting for its roles"
	if !rebooted {
		t.Error("the trial missed its deadline and did not reboot")
	}
	if s := stateOf(t, n, localstorage.SlotB); s.GetState() != private.SystemSlots_Slot_TRIAL || s.GetReason() != reason {
		t.Errorf("slot b recorded %v, want TRIAL with reason %q", s, reason)
	}
	v, err := n.Boot(t, localstorage.SlotA, updatetest.Running).JudgeBoot(context.Background(), healthy(), func() {}, func(string, ...any) {})
	if err != nil || v.RolledBack != "rolled back from "+newer+": "+reason {
		t.Errorf("JudgeBoot on slot a = %+v, %v; want rolled back with the trial's reason", v, err)
	}
}

// TestCannotTryWithoutFirmware: without EFI variables a node only stages.
func TestCannotTryWithoutFirmware(t *testing.T) {
	n := updatetest.New(t)
	i := update.New(update.Config{Running: localstorage.SlotA, Slots: &n.Storage.Root.ESP.Cairn.SystemSlots})
	if err := i.CanTry(); !errors.Is(err, update.ErrNoFirmware) {
		t.Errorf("CanTry = %v, want ErrNoFirmware", err)
	}
	if _, err := i.Activate(0); !errors.Is(err, update.ErrNoFirmware) {
		t.Errorf("Activate = %v, want ErrNoFirmware", err)
	}
}

// TestJudgeBootUnreadableRecord: a record that does not decode is said
// and left; the boot is not judged, and nothing fails or reboots.
func TestJudgeBootUnreadableRecord(t *testing.T) {
	n := updatetest.New(t)
	if err := n.Storage.Root.ESP.Cairn.SystemSlots.Write([]byte("not a record")); err != nil {
		t.Fatal(err)
	}
	var said []string
	v, err := n.Installer.JudgeBoot(context.Background(), healthy(), func() { t.Error("rebooted") }, func(f string, a ...any) {
		said = append(said, f)
	})
	if err != nil || v != (update.Verdict{}) || len(said) != 1 {
		t.Errorf("JudgeBoot = %+v, %v, said %q; want nothing judged, one line said", v, err, said)
	}
}
