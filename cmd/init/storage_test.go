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
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
	"cairn.dev/cairn/pkg/verity"
)

// fakeDisks is a data partition in memory: blank until MountNew, then
// set up with one key pair.
type fakeDisks struct {
	mu        sync.Mutex
	setUp     bool
	key       string
	formats   int
	espErrors int // MountESP fails this many times first
	// systemErr is what MountSystem returns; systemCalls and espCalls
	// count the calls (system_test.go).
	systemErr             error
	systemCalls, espCalls int
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

func (f *fakeDisks) MountSystem(localstorage.Slot, verity.Params) (localstorage.SystemMount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.systemCalls++
	return localstorage.SystemMount{Partition: "/dev/vda2"}, f.systemErr
}

func (f *fakeDisks) MountNew(ctx context.Context, n, c []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setUp, f.key = true, string(n)+string(c)
	f.formats++
	return nil
}

func (f *fakeDisks) MountExisting(n, c []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.setUp:
		return errors.New("data partition has no Cairn header")
	case f.key != string(n)+string(c):
		return localstorage.ErrWrongKey
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
// and its data partition at data, and the phase lines it prints.
func testStorage(disks *fakeDisks, esp, data string, node, cluster string) (*storage, *phaseLines) {
	p := &phaseLines{}
	return &storage{
		disks:    disks,
		printf:   p.printf,
		espCairn: filepath.Join(esp, "cairn"),
		dataRoot: data,
		hooks:    newStorageHooks(testStorageFlags(node, cluster, "hello")),
	}, p
}

// TestStorageMountData walks the data partition through first boot, a
// later boot, a wrong key and a partition set up by someone else, and
// checks that only a partition that was never set up is formatted.
func TestStorageMountData(t *testing.T) {
	ctx := context.Background()
	esp := t.TempDir()
	disks := &fakeDisks{}

	st, _ := testStorage(disks, esp, t.TempDir(), "n", "c")
	if how, err := st.mountData(ctx, testLog); err != nil || how != "new" {
		t.Fatalf("first mountData = %q, %v, want new", how, err)
	}
	st, _ = testStorage(disks, esp, t.TempDir(), "n", "c")
	if how, err := st.mountData(ctx, testLog); err != nil || how != "existing" {
		t.Fatalf("second mountData = %q, %v, want existing", how, err)
	}
	st, _ = testStorage(disks, esp, t.TempDir(), "n", "wrong")
	if _, err := st.mountData(ctx, testLog); !errors.Is(err, localstorage.ErrWrongKey) || !strings.Contains(err.Error(), "not formatting") {
		t.Errorf("mountData with a wrong key = %v, want ErrWrongKey saying it does not format", err)
	}
	// Without the ESP's record, a header of other keys still stops it.
	st, _ = testStorage(disks, t.TempDir(), t.TempDir(), "n", "wrong")
	if _, err := st.mountData(ctx, testLog); !errors.Is(err, localstorage.ErrWrongKey) {
		t.Errorf("mountData with a wrong key and no ESP record = %v, want ErrWrongKey", err)
	}
	if disks.formats != 1 {
		t.Errorf("the partition was formatted %d times, want 1", disks.formats)
	}
}

// testLog takes the storage child's log entries in tests.
var testLog = logtree.New().LeveledFor("test")

// TestStorageRun runs the storage child under a supervisor whose ESP
// fails twice at first: it is restarted until it mounts everything and
// writes the marker; run again on the same disks, it finds the marker.
func TestStorageRun(t *testing.T) {
	disks := &fakeDisks{espErrors: 2}
	esp, data := t.TempDir(), t.TempDir()
	st, lines := testStorage(disks, esp, data, "n", "c")
	cancel, _ := supervisortest.Harness(t, st.run)
	lines.wait(t, "data partition mounted (new)")
	lines.wait(t, "wrote marker")
	cancel()

	st, lines = testStorage(disks, esp, data, "n", "c")
	supervisortest.Harness(t, st.run)
	lines.wait(t, "data partition mounted (existing)")
	lines.wait(t, "found marker hello")

	b, err := os.ReadFile(filepath.Join(data, testMarkerFile))
	if err != nil || string(b) != "hello\n" {
		t.Errorf("marker file = %q, %v, want %q", b, err, "hello\n")
	}
	disks.mu.Lock()
	defer disks.mu.Unlock()
	if disks.formats != 1 {
		t.Errorf("the partition was formatted %d times, want 1", disks.formats)
	}
}

// testStorageFlags are the test flags of a node whose data partition is
// keyed by node and cluster (each padded with zeros to a key's size) and
// which writes marker.
func testStorageFlags(node, cluster, marker string) testFlags {
	f := testFlags{storageKeys: true, marker: marker}
	copy(f.nodeKey[:], node)
	copy(f.clusterKey[:], cluster)
	return f
}
