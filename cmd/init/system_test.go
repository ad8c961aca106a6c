//go:build cairntest

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// systemStorage returns a storage child on disks with the system flags of
// a command line, and the values it sets: the booted slot, and true when
// everything is mounted.
func systemStorage(disks *fakeDisks, line string) (*storage, *phaseLines, *memory.Value[bool]) {
	st, lines := testStorage(disks, "/nonexistent", "/nonexistent", "")
	st.system = parseSystemFlags(cmdline.Parse(line))
	st.systemRoot = "/system"
	var mounted memory.Value[bool]
	st.mounted = &mounted
	return st, lines, &mounted
}

// count returns how many times the phase lines contain s.
func (p *phaseLines) count(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(strings.Join(p.lines, "\n"), s)
}

// TestStorageMountsSystemFirst: with the build's command line, the slot
// that matches is mounted before the ESP, its mount is timed on the
// consoles, and the booted slot is handed on before mounted is set.
func TestStorageMountsSystemFirst(t *testing.T) {
	found := localstorage.SystemMount{
		BootedSystem: localstorage.BootedSystem{Slot: localstorage.SlotB, Params: testParams, Partition: "/dev/vda3"},
		Passed:       []localstorage.PassedSlot{{Slot: localstorage.SlotA, Err: fmt.Errorf("%w: holds another image", localstorage.ErrSlotMismatch)}},
	}
	disks := &fakeDisks{matching: &found}
	st, lines, mounted := systemStorage(disks, buildCmdline)
	var booted memory.Value[*localstorage.BootedSystem]
	st.booted = &booted
	// bootedWhenMounted is the booted slot as mounted turned true.
	bootedWhenMounted := make(chan *localstorage.BootedSystem, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if _, err := mounted.Watch().Get(ctx, event.Filter(func(v bool) bool { return v })); err != nil {
			bootedWhenMounted <- nil
			return
		}
		b, _ := booted.Watch().Get(ctx, event.BacklogOnly[*localstorage.BootedSystem]())
		bootedWhenMounted <- b
	}()
	supervisortest.Harness(t, st.run)
	lines.wait(t, "system partition b mounted at /system (verity ")
	got := <-bootedWhenMounted
	if got == nil {
		t.Fatalf("mounted was set without the booted slot, or never")
	}
	if diff := cmp.Diff(found.BootedSystem, *got); diff != "" {
		t.Errorf("booted slot (-want +got):\n%s", diff)
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.matchingCalls != 1 || disks.systemCalls != 0 || disks.espCalls != 1 {
		t.Errorf("MountMatchingSystem called %d times, MountSystem %d, MountESP %d; want once, never, once", disks.matchingCalls, disks.systemCalls, disks.espCalls)
	}
	if n := lines.count("is corrupt"); n != 0 {
		t.Errorf("a slot of another image was called corrupt on the consoles")
	}
}

// TestStorageForcedSlot: cairn.system= mounts that slot, not the one
// found by content.
func TestStorageForcedSlot(t *testing.T) {
	disks := &fakeDisks{}
	st, lines, _ := systemStorage(disks, buildCmdline+" cairn.system=b")
	supervisortest.Harness(t, st.run)
	lines.wait(t, "system partition b mounted at /system (verity ")
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.systemCalls != 1 || disks.matchingCalls != 0 {
		t.Errorf("MountSystem called %d times, MountMatchingSystem %d, want once and never", disks.systemCalls, disks.matchingCalls)
	}
}

// TestStorageSystemCorrupt: a forced slot that does not match is said
// once, naming the slot and the root hash, and not tried again, while
// the child keeps failing (and is restarted with backoff); nothing after
// it is mounted.
func TestStorageSystemCorrupt(t *testing.T) {
	disks := &fakeDisks{systemErr: fmt.Errorf("%w: slot a: read: input/output error", localstorage.ErrSystemCorrupt)}
	st, lines, mounted := systemStorage(disks, buildCmdline+" cairn.system=a")
	supervisortest.Harness(t, st.run)
	want := fmt.Sprintf("system partition a is corrupt: it does not match root hash %x; not using it", testParams.RootHash)
	lines.wait(t, want)
	// The supervisor's backoff starts at 100 ms: wait for a few restarts.
	time.Sleep(time.Second)
	if n := lines.count("is corrupt"); n != 1 {
		t.Errorf("the corruption was said %d times on the consoles, want once", n)
	}
	if n := lines.count("no verified system partition"); n != 0 {
		t.Errorf("a forced corrupt slot was also said as no verified system partition")
	}
	disks.mu.Lock()
	esp, calls := disks.espCalls, disks.systemCalls
	disks.mu.Unlock()
	if esp != 0 || calls != 1 {
		t.Errorf("MountESP was called %d times and MountSystem %d times, want 0 and 1", esp, calls)
	}
	if !errors.Is(st.systemFailure, localstorage.ErrSystemCorrupt) {
		t.Errorf("the child keeps %v as its lasting failure, want ErrSystemCorrupt", st.systemFailure)
	}
	if v, err := mounted.Watch().Get(context.Background(), event.BacklogOnly[bool]()); err == nil && v {
		t.Errorf("mounted was set with a corrupt system partition")
	}
}

// TestStorageNoMatchingSystem: when no slot matches, the consoles say so
// once with both reasons, a corrupt slot on a line of its own, and the
// slots are not tried again.
func TestStorageNoMatchingSystem(t *testing.T) {
	passed := []localstorage.PassedSlot{
		{Slot: localstorage.SlotA, Err: fmt.Errorf("%w: slot a: read: input/output error", localstorage.ErrSystemCorrupt)},
		{Slot: localstorage.SlotB, Err: fmt.Errorf("%w: is empty", localstorage.ErrSlotMismatch)},
	}
	disks := &fakeDisks{
		matching:    &localstorage.SystemMount{Passed: passed},
		matchingErr: fmt.Errorf("%w %x: slot a: ...; slot b is empty", localstorage.ErrNoSystem, testParams.RootHash),
	}
	st, lines, mounted := systemStorage(disks, buildCmdline)
	supervisortest.Harness(t, st.run)
	lines.wait(t, fmt.Sprintf("no verified system partition: no system slot matches the root hash %x: slot a: ...; slot b is empty", testParams.RootHash))
	time.Sleep(time.Second)
	for s, want := range map[string]int{
		fmt.Sprintf("system partition a is corrupt: it does not match root hash %x; not using it", testParams.RootHash): 1,
		"system partition b is corrupt":  0,
		"no verified system partition: ": 1,
	} {
		if n := lines.count(s); n != want {
			t.Errorf("the consoles said %q %d times, want %d", s, n, want)
		}
	}
	disks.mu.Lock()
	esp, calls := disks.espCalls, disks.matchingCalls
	disks.mu.Unlock()
	if esp != 0 || calls != 1 {
		t.Errorf("MountESP was called %d times and MountMatchingSystem %d times, want 0 and 1", esp, calls)
	}
	if v, err := mounted.Watch().Get(context.Background(), event.BacklogOnly[bool]()); err == nil && v {
		t.Errorf("mounted was set with no matching system partition")
	}
}

// TestStorageSystemUnreadable: a slot that could not be read at all is
// tried again, with the supervisor's backoff, and nothing is said on the
// consoles until something lasting is known.
func TestStorageSystemUnreadable(t *testing.T) {
	disks := &fakeDisks{matchingErr: errors.New("when looking for the system slot: no disk has an EFI system partition")}
	st, lines, _ := systemStorage(disks, buildCmdline)
	supervisortest.Harness(t, st.run)
	time.Sleep(time.Second)
	disks.mu.Lock()
	calls := disks.matchingCalls
	disks.mu.Unlock()
	if calls < 2 {
		t.Errorf("MountMatchingSystem was called %d times in a second of backoff, want it tried again", calls)
	}
	if n := lines.count("system partition"); n != 0 {
		t.Errorf("the consoles said something of the system partition %d times, want nothing yet", n)
	}
}

// TestStorageNoSystemFlags: without the verity flag, nothing is mounted
// and the consoles say why, once.
func TestStorageNoSystemFlags(t *testing.T) {
	disks := &fakeDisks{}
	st, lines, _ := systemStorage(disks, "console=ttyS0")
	supervisortest.Harness(t, st.run)
	lines.wait(t, "no verified system partition: the command line has no cairn.verity=")
	time.Sleep(500 * time.Millisecond)
	if n := lines.count("no verified system partition"); n != 1 {
		t.Errorf("the missing flag was said %d times, want once", n)
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.systemCalls != 0 || disks.matchingCalls != 0 || disks.espCalls != 0 {
		t.Errorf("MountSystem called %d times, MountMatchingSystem %d, MountESP %d, want none", disks.systemCalls, disks.matchingCalls, disks.espCalls)
	}
	if errors.Is(st.system.err, localstorage.ErrSystemCorrupt) {
		t.Errorf("missing flags reported as corruption")
	}
}

// TestStorageLoadsModules: the disks' modules are loaded before anything
// is mounted, the system partition's after it is mounted and before the
// ESP, whose vfat may be one of them, and the data partition's after
// mounted is set and before dataReady; a failed step is tried again
// without mounting twice.
func TestStorageLoadsModules(t *testing.T) {
	disks := &fakeDisks{}
	st, lines, mounted := systemStorage(disks, buildCmdline)
	var dataReady memory.Value[bool]
	st.dataReady = &dataReady
	var order []string
	step := func(name string) func(context.Context, logtree.LeveledLogger) error {
		failed := false
		return func(context.Context, logtree.LeveledLogger) error {
			disks.mu.Lock()
			defer disks.mu.Unlock()
			m, _ := mounted.Watch().Get(context.Background(), event.BacklogOnly[bool]())
			r, _ := dataReady.Watch().Get(context.Background(), event.BacklogOnly[bool]())
			order = append(order, fmt.Sprintf("%s: %d system, %d ESP, mounted %v, data ready %v", name, disks.matchingCalls, disks.espCalls, m, r))
			if !failed {
				failed = true
				return errors.New("sysfs away")
			}
			return nil
		}
	}
	st.diskModules, st.systemModules, st.dataModules = step("disks"), step("system"), step("data")
	supervisortest.Harness(t, st.run)
	lines.wait(t, "system partition a mounted at /system")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := dataReady.Watch().Get(ctx, event.Filter(func(v bool) bool { return v })); err != nil {
		t.Fatalf("dataReady was never set: %v", err)
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	want := []string{
		"disks: 0 system, 0 ESP, mounted false, data ready false",
		"disks: 0 system, 0 ESP, mounted false, data ready false",
		"system: 1 system, 0 ESP, mounted false, data ready false",
		"system: 1 system, 0 ESP, mounted false, data ready false",
		"data: 1 system, 1 ESP, mounted true, data ready false",
		"data: 1 system, 1 ESP, mounted true, data ready false",
	}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("module steps (-want +got):\n%s", diff)
	}
}
