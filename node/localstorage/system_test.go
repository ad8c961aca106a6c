package localstorage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/pkg/verity"
)

// The system half of fileBlock: slot X is the file system-X, and the
// "verity device" checks the whole slot against p when opened, as if
// every block were read. A slot that does not match maps to a directory,
// whose reads fail, as the kernel's reads of a corrupt block do.

func (b *fileBlock) slot(s Slot) string { return filepath.Join(b.dir, "system-"+string(s)) }

func (b *fileBlock) systemPartition(s Slot) (string, uint64, error) {
	st, err := os.Stat(b.slot(s))
	if err != nil {
		return "", 0, err
	}
	return b.slot(s), uint64(st.Size()), nil
}

func (b *fileBlock) openVerity(name, device string, p verity.Params) (string, error) {
	b.verityOpened++
	b.corrupt = false
	data, err := os.ReadFile(device)
	if err != nil {
		return "", err
	}
	fs := data[:p.DataBlocks*verity.BlockSize]
	tree, err := verity.Compute(bytes.NewReader(fs), p.Salt)
	if err != nil {
		return "", err
	}
	stored := data[p.HashOffset : p.HashOffset+uint64(len(tree.Hashes))]
	if !bytes.Equal(tree.RootHash, p.RootHash) || !bytes.Equal(tree.Hashes, stored) {
		b.corrupt = true
		mapped := filepath.Join(b.dir, "mapped-corrupt")
		return mapped, os.MkdirAll(mapped, 0o700)
	}
	mapped := filepath.Join(b.dir, "mapped-"+name)
	return mapped, os.WriteFile(mapped, fs, 0o600)
}

func (b *fileBlock) verityCorrupt(string) (bool, error) { return b.corrupt, nil }

func (b *fileBlock) closeVerity(string) error {
	b.verityClosed++
	return nil
}

// writeSlot writes a slot file as build/disk does: an image of blocks
// blocks, its hash tree, and zeros up to size; it returns the parameters.
func writeSlot(t *testing.T, path string, blocks int, size int64) verity.Params {
	t.Helper()
	fs := bytes.Repeat([]byte("erofs image block"), blocks*verity.BlockSize/17+1)[:blocks*verity.BlockSize]
	tree, err := verity.Compute(bytes.NewReader(fs), []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(fs, tree.Hashes...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return tree.Params([]byte("salt"))
}

func TestMountSystem(t *testing.T) {
	s, b := newTestStorage(t)
	p := writeSlot(t, b.slot(SlotA), 40, 1<<20)
	m, err := s.MountSystem(SlotA, p)
	if err != nil {
		t.Fatalf("MountSystem: %v", err)
	}
	want := filepath.Join(b.dir, "mapped-system") + " " + s.Root.System.FullPath() + " erofs "
	if len(b.mounted) != 1 || b.mounted[0] != want {
		t.Errorf("mounts = %q, want [%q]", b.mounted, want)
	}
	if m.Partition != b.slot(SlotA) || b.verityClosed != 0 {
		t.Errorf("MountSystem = %+v and %d closes, want partition %s and none", m, b.verityClosed, b.slot(SlotA))
	}
	if st, err := os.Stat(s.Root.System.FullPath()); err != nil || !st.IsDir() {
		t.Errorf("mount point %s: %v", s.Root.System.FullPath(), err)
	}
}

// TestMountSystemCorrupt changes the slot in the places a node must catch
// and wants ErrSystemCorrupt, no mount and the verity device removed.
func TestMountSystemCorrupt(t *testing.T) {
	for name, change := range map[string]func(path string, p *verity.Params){
		"byte in the first block": func(path string, p *verity.Params) { flipByte(t, path, 100) },
		"byte in the superblock":  func(path string, p *verity.Params) { flipByte(t, path, 1024) },
		"byte in the hash tree":   func(path string, p *verity.Params) { flipByte(t, path, int64(p.HashOffset)) },
		"other root hash":         func(path string, p *verity.Params) { p.RootHash = bytes.Repeat([]byte{1}, verity.DigestSize) },
		"slot too small":          func(path string, p *verity.Params) { os.Truncate(path, int64(p.End())-1) },
	} {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			s, b := newTestStorage(t)
			p := writeSlot(t, b.slot(SlotB), 300, 2<<20)
			change(b.slot(SlotB), &p)
			_, err := s.MountSystem(SlotB, p)
			if !errors.Is(err, ErrSystemCorrupt) || !strings.Contains(err.Error(), "slot b") {
				t.Errorf("MountSystem = %v, want ErrSystemCorrupt naming slot b", err)
			}
			if len(b.mounted) != 0 {
				t.Errorf("a corrupt slot was mounted: %q", b.mounted)
			}
			if b.corrupt && b.verityClosed != 1 {
				t.Errorf("the verity device was closed %d times, want once", b.verityClosed)
			}
		})
	}
}

func TestMountSystemErrors(t *testing.T) {
	s, b := newTestStorage(t)
	p := writeSlot(t, b.slot(SlotA), 4, 1<<20)
	if _, err := s.MountSystem(SlotB, p); err == nil || errors.Is(err, ErrSystemCorrupt) {
		t.Errorf("MountSystem(missing slot) = %v, want an error that is not ErrSystemCorrupt", err)
	}
	bad := p
	bad.HashOffset = 1
	if _, err := s.MountSystem(SlotA, bad); err == nil {
		t.Error("MountSystem(bad parameters) succeeded")
	}
	if len(b.mounted) != 0 {
		t.Errorf("mounted %q", b.mounted)
	}
}

// TestMountMatchingSystem finds the slot by content: slot a first, then
// slot b, passing over a slot that holds another image or none after one
// block, without a verity device.
func TestMountMatchingSystem(t *testing.T) {
	for _, tc := range []struct {
		name string
		// a and b prepare the slots; the image is of 40 blocks.
		a, b func(t *testing.T, path string)
		// first is the slot the firmware booted.
		first Slot
		want  Slot
		// passed are the slots passed over and what their reasons say.
		passed map[Slot]string
		// opened is how many verity devices were set up.
		opened int
	}{
		{"a holds another image, b matches", otherImage, theImage, "", SlotB, map[Slot]string{SlotA: "holds another image"}, 1},
		{"a is empty, b matches", emptySlot, theImage, "", SlotB, map[Slot]string{SlotA: "is empty"}, 1},
		{"a is too small, b matches", smallSlot, theImage, "", SlotB, map[Slot]string{SlotA: "is too small"}, 1},
		{"both match", theImage, theImage, "", SlotA, nil, 1},
		{"both match, b booted", theImage, theImage, SlotB, SlotB, nil, 1},
		{"b booted, only a matches", theImage, otherImage, SlotB, SlotA, map[Slot]string{SlotB: "holds another image"}, 1},
		{"a matches, b is empty", theImage, emptySlot, "", SlotA, nil, 1},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			b, p, m, err := mountMatchingFirst(t, tc.a, tc.b, tc.first)
			if err != nil {
				t.Fatalf("MountMatchingSystem: %v", err)
			}
			want := BootedSystem{Slot: tc.want, Params: p, Partition: b.slot(tc.want)}
			if diff := cmp.Diff(want, m.BootedSystem); diff != "" {
				t.Errorf("MountMatchingSystem booted (-want +got):\n%s", diff)
			}
			if len(m.Passed) != len(tc.passed) {
				t.Errorf("MountMatchingSystem passed over %+v, want %v", m.Passed, tc.passed)
			}
			for _, ps := range m.Passed {
				if !errors.Is(ps.Err, ErrSlotMismatch) || !strings.Contains(ps.Err.Error(), tc.passed[ps.Slot]) {
					t.Errorf("slot %s passed over for %v, want ErrSlotMismatch saying %q", ps.Slot, ps.Err, tc.passed[ps.Slot])
				}
			}
			if b.verityOpened != tc.opened || len(b.mounted) != 1 {
				t.Errorf("%d verity devices set up and mounts %q, want %d and one", b.verityOpened, b.mounted, tc.opened)
			}
		})
	}
}

// TestMountMatchingSystemNone: with no slot holding the image, the error
// is ErrNoSystem naming both slots' reasons, a corrupt slot's among them;
// nothing is mounted.
func TestMountMatchingSystemNone(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b func(t *testing.T, path string)
		// want are what the error says of each slot; corrupt is the slot
		// whose reason is ErrSystemCorrupt.
		want    []string
		corrupt Slot
	}{
		{"another image and empty", otherImage, emptySlot, []string{"slot a holds another image", "slot b is empty"}, ""},
		{"empty and another image", emptySlot, otherImage, []string{"slot a is empty", "slot b holds another image"}, ""},
		{"corrupt and empty", corruptImage, emptySlot, []string{"slot a: system partition does not match its root hash", "slot b is empty"}, SlotA},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			b, p, m, err := mountMatching(t, tc.a, tc.b)
			if !errors.Is(err, ErrNoSystem) {
				t.Fatalf("MountMatchingSystem = %v, want ErrNoSystem", err)
			}
			for _, w := range append(tc.want, fmt.Sprintf("%x", p.RootHash)) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("MountMatchingSystem = %q, want it to say %q", err, w)
				}
			}
			if len(m.Passed) != 2 || m.Passed[0].Slot != SlotA || m.Passed[1].Slot != SlotB {
				t.Fatalf("MountMatchingSystem passed over %+v, want slots a and b", m.Passed)
			}
			for _, ps := range m.Passed {
				if got := errors.Is(ps.Err, ErrSystemCorrupt); got != (ps.Slot == tc.corrupt) {
					t.Errorf("slot %s: %v is ErrSystemCorrupt: %v, want %v", ps.Slot, ps.Err, got, !got)
				}
			}
			if len(b.mounted) != 0 {
				t.Errorf("mounted %q", b.mounted)
			}
		})
	}
}

// TestMountMatchingSystemUnreadable: a slot that cannot be read at all is
// no reason to give up for good: the error is not ErrNoSystem, and the
// other slot is still found.
func TestMountMatchingSystemUnreadable(t *testing.T) {
	s, b := newTestStorage(t)
	emptySlot(t, b.slot(SlotB))
	p := imageParams(t)
	if _, err := s.MountMatchingSystem(p, ""); err == nil || errors.Is(err, ErrNoSystem) || !strings.Contains(err.Error(), "slot a") {
		t.Errorf("MountMatchingSystem without slot a = %v, want an error naming slot a that is not ErrNoSystem", err)
	}
	theImage(t, b.slot(SlotB))
	if m, err := s.MountMatchingSystem(p, ""); err != nil || m.Slot != SlotB {
		t.Errorf("MountMatchingSystem without slot a = %+v, %v; want slot b", m, err)
	}
}

// TestMountSystemExplicit: a slot named mounts that slot, even when the
// other holds the image too, and a slot named that holds another image
// is corrupt.
func TestMountSystemExplicit(t *testing.T) {
	s, b := newTestStorage(t)
	theImage(t, b.slot(SlotA))
	theImage(t, b.slot(SlotB))
	p := imageParams(t)
	m, err := s.MountSystem(SlotB, p)
	if err != nil || m.Slot != SlotB || m.Partition != b.slot(SlotB) {
		t.Errorf("MountSystem(b) = %+v, %v; want slot b", m, err)
	}
	otherImage(t, b.slot(SlotA))
	if _, err := s.MountSystem(SlotA, p); !errors.Is(err, ErrSystemCorrupt) || !strings.Contains(err.Error(), "slot a holds another image") {
		t.Errorf("MountSystem(a holding another image) = %v, want ErrSystemCorrupt saying so", err)
	}
}

// The slots of the tests above: the image of imageParams, another image,
// the image with its first block changed, zeros, and a slot too small.
const (
	imageBlocks = 40
	slotSize    = 1 << 20
)

func theImage(t *testing.T, path string) { writeSlot(t, path, imageBlocks, slotSize) }
func otherImage(t *testing.T, path string) {
	writeSlot(t, path, 2*imageBlocks, slotSize)
}
func corruptImage(t *testing.T, path string) {
	theImage(t, path)
	flipByte(t, path, 100)
}
func emptySlot(t *testing.T, path string) {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, slotSize); err != nil {
		t.Fatal(err)
	}
}
func smallSlot(t *testing.T, path string) {
	if err := os.WriteFile(path, make([]byte, imageBlocks*verity.BlockSize), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mountMatching prepares the slots with a and b and calls
// MountMatchingSystem for theImage.
func mountMatching(t *testing.T, a, b func(t *testing.T, path string)) (*fileBlock, verity.Params, SystemMount, error) {
	return mountMatchingFirst(t, a, b, "")
}

// mountMatchingFirst is mountMatching with first the slot the firmware
// booted.
func mountMatchingFirst(t *testing.T, a, b func(t *testing.T, path string), first Slot) (*fileBlock, verity.Params, SystemMount, error) {
	s, fb := newTestStorage(t)
	a(t, fb.slot(SlotA))
	b(t, fb.slot(SlotB))
	p := imageParams(t)
	m, err := s.MountMatchingSystem(p, first)
	return fb, p, m, err
}

// imageParams are the verity parameters of theImage.
func imageParams(t *testing.T) verity.Params {
	return writeSlot(t, filepath.Join(t.TempDir(), "image"), imageBlocks, slotSize)
}

func TestSlotOther(t *testing.T) {
	if SlotA.Other() != SlotB || SlotB.Other() != SlotA {
		t.Errorf("Other of a, b = %q, %q; want b, a", SlotA.Other(), SlotB.Other())
	}
}

func TestSystemPartition(t *testing.T) {
	s, b := newTestStorage(t)
	theImage(t, b.slot(SlotB))
	if dev, size, err := s.SystemPartition(SlotB); err != nil || dev != b.slot(SlotB) || size != slotSize {
		t.Errorf("SystemPartition(b) = %q, %d, %v; want %q, %d", dev, size, err, b.slot(SlotB), slotSize)
	}
	if _, _, err := s.SystemPartition(SlotA); err == nil || !strings.Contains(err.Error(), "slot a") {
		t.Errorf("SystemPartition(missing a) = %v, want an error naming slot a", err)
	}
}

func TestParseSlot(t *testing.T) {
	for in, want := range map[string]Slot{"a": SlotA, "b": SlotB} {
		if got, err := ParseSlot(in); err != nil || got != want {
			t.Errorf("ParseSlot(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "A", "c", "a "} {
		if _, err := ParseSlot(bad); err == nil {
			t.Errorf("ParseSlot(%q) succeeded, want an error", bad)
		}
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestMkfsOnSystemPartition: by default MountNew runs the mkfs.xfs the
// system image carries, below the system partition's mount point.
func TestMkfsOnSystemPartition(t *testing.T) {
	root := t.TempDir()
	s, err := New(Config{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.c.MkfsXFS, filepath.Join(root, "system/usr/sbin/mkfs.xfs"); got != want {
		t.Errorf("default MkfsXFS = %q, want %q", got, want)
	}
}
