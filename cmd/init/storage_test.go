//go:build cairntest

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/testhooks"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
	"cairn.dev/cairn/pkg/verity"
)

// fakeDisks is a data partition in memory: blank until MountNew
// formats it.
type fakeDisks struct {
	mu        sync.Mutex
	formats   int
	espErrors int // MountESP fails this many times first
	// systemErr is what MountSystem returns; matching and matchingErr
	// what MountMatchingSystem returns, slot a by default; systemCalls,
	// matchingCalls and espCalls count the calls (system_test.go).
	systemErr                            error
	matching                             *localstorage.SystemMount
	matchingErr                          error
	systemCalls, matchingCalls, espCalls int
}

func (f *fakeDisks) MountESP() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.espCalls++
	if f.espErrors > 0 {
		f.espErrors--
		return errors.New("no ESP yet")
	}
	return nil
}

func (f *fakeDisks) MountEphemeral() error { return nil }

func (f *fakeDisks) MountSystem(slot localstorage.Slot, p verity.Params) (localstorage.SystemMount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.systemCalls++
	return localstorage.SystemMount{BootedSystem: localstorage.BootedSystem{Slot: slot, Params: p, Partition: "/dev/vda2"}}, f.systemErr
}

func (f *fakeDisks) MountMatchingSystem(p verity.Params, _ localstorage.Slot) (localstorage.SystemMount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.matchingCalls++
	if f.matching != nil {
		return *f.matching, f.matchingErr
	}
	return localstorage.SystemMount{BootedSystem: localstorage.BootedSystem{Slot: localstorage.SlotA, Params: p, Partition: "/dev/vda2"}}, f.matchingErr
}

func (f *fakeDisks) MountNew(context.Context, []byte, []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.formats++
	return nil
}

// MountExisting opens any partition formatted before: which keys open it
// is node/testhooks' concern, tested there.
func (f *fakeDisks) MountExisting([]byte, []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.formats == 0 {
		return errors.New("data partition has no Cairn header")
	}
	return nil
}

// phaseLines records the phase lines of a storage child.
type phaseLines struct {
	mu    sync.Mutex
	lines []string
}

func (p *phaseLines) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, fmt.Sprintf(format, args...))
}

// wait waits up to 20s for a line containing want.
func (p *phaseLines) wait(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p.mu.Lock()
		got := strings.Join(p.lines, "\n")
		p.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no phase line %q within 20s; lines:\n%s", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testStorage returns a storage child on fake disks, with its ESP at esp
// and its data partition at data, and the phase lines it prints. It has
// the test hooks of the test-only flags of line.
func testStorage(disks *fakeDisks, esp, data, line string) (*storage, *phaseLines) {
	p := &phaseLines{}
	st := &storage{
		disks:    disks,
		printf:   p.printf,
		espCairn: filepath.Join(esp, "cairn"),
		dataRoot: data,
	}
	f, _ := testhooks.Parse(cmdline.Parse(line))
	st.hooks = f.Storage(disks, st.espCairn, st.dataRoot, p.printf)
	return st, p
}

// storageKeysLine asks for the data partition, keyed on the command line,
// and a marker on it.
var storageKeysLine = "cairn.test.storage-keys=" + strings.Repeat("ab", localstorage.KeySize) + ":" +
	strings.Repeat("cd", localstorage.KeySize) + " cairn.test.marker=hello"

// TestStorageRun runs the storage child under a supervisor whose ESP
// fails twice at first: it is restarted until it mounts everything and
// its test hooks write the marker; run again on the same disks, it finds
// the marker.
func TestStorageRun(t *testing.T) {
	disks := &fakeDisks{espErrors: 2}
	esp, data := t.TempDir(), t.TempDir()
	st, lines := testStorage(disks, esp, data, storageKeysLine)
	cancel, _ := supervisortest.Harness(t, st.run)
	lines.wait(t, "data partition mounted (new)")
	lines.wait(t, "wrote marker")
	cancel()

	st, lines = testStorage(disks, esp, data, storageKeysLine)
	supervisortest.Harness(t, st.run)
	lines.wait(t, "data partition mounted (existing)")
	lines.wait(t, "found marker hello")

	b, err := os.ReadFile(filepath.Join(data, "marker"))
	if err != nil || string(b) != "hello\n" {
		t.Errorf("marker file = %q, %v, want %q", b, err, "hello\n")
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.formats != 1 {
		t.Errorf("the partition was formatted %d times, want 1", disks.formats)
	}
}
