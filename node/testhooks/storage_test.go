//go:build cairntest

package testhooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/logtree"
)

// fakeDisks is a data partition in memory: blank until MountNew, then
// set up with one key pair.
type fakeDisks struct {
	mu      sync.Mutex
	setUp   bool
	key     string
	formats int
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

// testLog takes the hooks' log entries in tests.
var testLog = logtree.New().LeveledFor("test")

// testStorage returns the storage hooks of a node whose data partition is
// keyed by node and cluster (each padded with zeros to a key's size) and
// which writes the marker "hello", on disks with the ESP at esp and the
// data partition at data, and the phase lines they print.
func testStorage(disks *fakeDisks, esp, data string, node, cluster string) (*Storage, *[]string) {
	f := Flags{storageKeys: true, marker: "hello"}
	copy(f.nodeKey[:], node)
	copy(f.clusterKey[:], cluster)
	var lines []string
	h := f.Storage(disks, filepath.Join(esp, "cairn"), data, func(format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...))
	})
	return &h, &lines
}

// TestStorageMountData walks the data partition through first boot, a
// later boot, a wrong key and a partition set up by someone else, and
// checks that only a partition that was never set up is formatted.
func TestStorageMountData(t *testing.T) {
	ctx := context.Background()
	esp := t.TempDir()
	disks := &fakeDisks{}

	h, _ := testStorage(disks, esp, t.TempDir(), "n", "c")
	if how, err := h.mountData(ctx, testLog); err != nil || how != "new" {
		t.Fatalf("first mountData = %q, %v, want new", how, err)
	}
	h, _ = testStorage(disks, esp, t.TempDir(), "n", "c")
	if how, err := h.mountData(ctx, testLog); err != nil || how != "existing" {
		t.Fatalf("second mountData = %q, %v, want existing", how, err)
	}
	h, _ = testStorage(disks, esp, t.TempDir(), "n", "wrong")
	if _, err := h.mountData(ctx, testLog); !errors.Is(err, localstorage.ErrWrongKey) || !strings.Contains(err.Error(), "not formatting") {
		t.Errorf("mountData with a wrong key = %v, want ErrWrongKey saying it does not format", err)
	}
	// Without the ESP's record, a header of other keys still stops it.
	h, _ = testStorage(disks, t.TempDir(), t.TempDir(), "n", "wrong")
	if _, err := h.mountData(ctx, testLog); !errors.Is(err, localstorage.ErrWrongKey) {
		t.Errorf("mountData with a wrong key and no ESP record = %v, want ErrWrongKey", err)
	}
	if disks.formats != 1 {
		t.Errorf("the partition was formatted %d times, want 1", disks.formats)
	}
}

// TestStorageRunMarker runs the hooks of two boots on the same disks: the
// first sets the data partition up and writes the marker, the second
// finds both.
func TestStorageRunMarker(t *testing.T) {
	disks := &fakeDisks{}
	esp, data := t.TempDir(), t.TempDir()
	for _, want := range [][]string{
		{"data partition mounted (new)", "wrote marker"},
		{"data partition mounted (existing)", "found marker hello"},
	} {
		h, lines := testStorage(disks, esp, data, "n", "c")
		if err := h.Run(context.Background(), testLog); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if strings.Join(*lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("Run said %q, want %q", *lines, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(data, testMarkerFile))
	if err != nil || string(b) != "hello\n" {
		t.Errorf("marker file = %q, %v, want %q", b, err, "hello\n")
	}
	if disks.formats != 1 {
		t.Errorf("the partition was formatted %d times, want 1", disks.formats)
	}
}
