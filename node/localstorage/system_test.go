package localstorage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
