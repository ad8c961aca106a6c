//go:build cairntest

package main

import (
	"bytes"
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
	"cairn.dev/cairn/pkg/verity"
)

var testParams = verity.Params{
	RootHash: bytes.Repeat([]byte{0xab}, verity.DigestSize), Salt: []byte{1, 2},
	DataBlocks: 130, HashOffset: 130 * verity.BlockSize,
}

// systemCmdline is a command line as the image build writes it for slot:
// build/system's TestCmdline pins the same form on the writer's side.
func systemCmdline(slot string) string {
	return "console=ttyS0 cairn.system=" + slot + " cairn.verity=" + testParams.String()
}

// TestParseSystemFlags reads what the image build writes, and names what
// is missing or wrong.
func TestParseSystemFlags(t *testing.T) {
	got := parseSystemFlags(cmdline.Parse(systemCmdline("b")))
	if got.err != nil || got.slot != localstorage.SlotB || !cmp.Equal(got.verity, testParams) {
		t.Errorf("parseSystemFlags(build's command line) = %+v, want slot b and %+v", got, testParams)
	}
	for line, want := range map[string]string{
		"console=ttyS0": "no cairn.system",
		"cairn.system=c cairn.verity=" + testParams.String(): "cairn.system",
		"cairn.system=a":                         "no cairn.verity",
		"cairn.system=a cairn.verity=00,,1,4096": "cairn.verity",
	} {
		if got := parseSystemFlags(cmdline.Parse(line)); got.err == nil || !strings.Contains(got.err.Error(), want) {
			t.Errorf("parseSystemFlags(%q) error = %v, want one naming %q", line, got.err, want)
		}
	}
}

// systemStorage returns a storage child on disks with the system flags of
// a command line, and the value it sets when everything is mounted.
func systemStorage(disks *fakeDisks, line string) (*storage, *phaseLines, *memory.Value[bool]) {
	st, lines := testStorage(disks, "/nonexistent", "/nonexistent", "")
	st.system = parseSystemFlags(cmdline.Parse(line))
	st.systemRoot = "/system"
	var mounted memory.Value[bool]
	st.mounted = &mounted
	return st, lines, &mounted
}

// TestStorageMountsSystemFirst: the system partition is mounted before
// the ESP, and its mount is timed on the consoles.
func TestStorageMountsSystemFirst(t *testing.T) {
	disks := &fakeDisks{}
	st, lines, mounted := systemStorage(disks, systemCmdline("a"))
	supervisortest.Harness(t, st.run)
	lines.wait(t, "system partition a mounted at /system (verity ")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := mounted.Watch().Get(ctx, event.Filter(func(v bool) bool { return v })); err != nil {
		t.Fatalf("mounted was never set: %v", err)
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.systemCalls != 1 || disks.espCalls != 1 {
		t.Errorf("MountSystem called %d times, MountESP %d, want once each", disks.systemCalls, disks.espCalls)
	}
}

// TestStorageSystemCorrupt: a slot that does not match is said once,
// naming the slot and the root hash, and not tried again, while the child
// keeps failing (and is restarted with backoff); nothing after it is
// mounted.
func TestStorageSystemCorrupt(t *testing.T) {
	disks := &fakeDisks{systemErr: fmt.Errorf("%w: slot a: read: input/output error", localstorage.ErrSystemCorrupt)}
	st, lines, mounted := systemStorage(disks, systemCmdline("a"))
	supervisortest.Harness(t, st.run)
	want := fmt.Sprintf("system partition a is corrupt: it does not match root hash %x; not using it", testParams.RootHash)
	lines.wait(t, want)
	// The supervisor's backoff starts at 100 ms: wait for a few restarts.
	time.Sleep(time.Second)
	lines.mu.Lock()
	n := strings.Count(strings.Join(lines.lines, "\n"), "is corrupt")
	lines.mu.Unlock()
	if n != 1 {
		t.Errorf("the corruption was said %d times on the consoles, want once", n)
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

// TestStorageNoSystemFlags: without the flags, nothing is mounted and the
// consoles say why, once.
func TestStorageNoSystemFlags(t *testing.T) {
	disks := &fakeDisks{}
	st, lines, _ := systemStorage(disks, "console=ttyS0")
	supervisortest.Harness(t, st.run)
	lines.wait(t, "no verified system partition: the command line has no cairn.system=")
	time.Sleep(500 * time.Millisecond)
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.systemCalls != 0 || disks.espCalls != 0 {
		t.Errorf("MountSystem called %d times, MountESP %d, want neither", disks.systemCalls, disks.espCalls)
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
	st, lines, mounted := systemStorage(disks, systemCmdline("a"))
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
			order = append(order, fmt.Sprintf("%s: %d system, %d ESP, mounted %v, data ready %v", name, disks.systemCalls, disks.espCalls, m, r))
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
