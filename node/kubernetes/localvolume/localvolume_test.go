package localvolume

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/fsquota"
)

const mib = 1 << 20

// newManager returns a Manager on a fresh root in the temporary directory,
// whose reserve leaves room for volumes of room bytes. Where the temporary
// directory has no project quotas (a build machine's kernel without
// them), it skips, unless the test runs inside a node, where that is a
// failure (fixture.SkipOutsideNode).
func newManager(t *testing.T, room uint64) *Manager {
	t.Helper()
	root := filepath.Join(t.TempDir(), "volumes")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Root: root, Reserve: st.Blocks*uint64(st.Bsize) - room})
	if errors.Is(err, fsquota.ErrUnsupported) {
		fixture.SkipOutsideNode(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vols, err := m.List()
		if err != nil {
			t.Error(err)
		}
		for _, v := range vols {
			if err := m.Delete(v.Name); err != nil {
				t.Error(err)
			}
		}
	})
	return m
}

func statfsSize(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize)
}

func writeFile(path string, n int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(bytes.Repeat([]byte{0x5a}, n))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func full(err error) bool { return errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.ENOSPC) }

// TestFilesystemVolume creates, grows and deletes a filesystem volume:
// its data directory has exactly its size, and takes no more.
func TestFilesystemVolume(t *testing.T) {
	m := newManager(t, 64*mib)
	v, err := m.Create("pvc-fs", 8*mib, Filesystem)
	if err != nil {
		t.Fatal(err)
	}
	if v.Mode != Filesystem || v.Bytes != 8*mib || filepath.Base(v.Path) != dataDir {
		t.Errorf("Create = %+v, want a filesystem volume of 8 MiB at .../data", v)
	}
	if got := statfsSize(t, v.Path); got != 8*mib {
		t.Errorf("statfs of the volume: %d bytes, want %d", got, 8*mib)
	}
	if err := writeFile(filepath.Join(v.Path, "a"), 6*mib); err != nil {
		t.Fatalf("writing 6 MiB into 8: %v", err)
	}
	if err := writeFile(filepath.Join(v.Path, "b"), 4*mib); !full(err) {
		t.Errorf("writing 4 MiB more: %v, want EDQUOT or ENOSPC", err)
	}
	u, l, err := m.Usage("pvc-fs")
	if err != nil || u.Bytes < 6*mib || l.Bytes != 8*mib || l.Inodes != minInodes {
		t.Errorf("Usage = %+v of %+v, %v; want at least 6 MiB used of 8 MiB and %d inodes", u, l, err, minInodes)
	}

	// Again, as a retried request: the same volume.
	if again, err := m.Create("pvc-fs", 8*mib, Filesystem); err != nil || again != v {
		t.Errorf("Create again = %+v, %v; want %+v", again, err, v)
	}
	if _, err := m.Create("pvc-fs", 16*mib, Filesystem); !errors.Is(err, ErrExists) {
		t.Errorf("Create with another size = %v, want ErrExists", err)
	}

	v, err = m.Expand("pvc-fs", 16*mib)
	if err != nil || v.Bytes != 16*mib {
		t.Fatalf("Expand = %+v, %v; want 16 MiB", v, err)
	}
	if got := statfsSize(t, v.Path); got != 16*mib {
		t.Errorf("statfs after Expand: %d bytes, want %d", got, 16*mib)
	}
	if err := writeFile(filepath.Join(v.Path, "b"), 4*mib); err != nil {
		t.Errorf("writing 4 MiB more after Expand: %v", err)
	}
	if _, err := m.Expand("pvc-fs", 8*mib); !errors.Is(err, ErrInvalid) {
		t.Errorf("Expand to less = %v, want ErrInvalid", err)
	}

	if err := m.Delete("pvc-fs"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("pvc-fs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if err := m.Delete("pvc-fs"); err != nil {
		t.Errorf("Delete of a deleted volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.Root, "pvc-fs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's directory after Delete: %v, want gone", err)
	}
}

// TestBlockVolume creates and grows a block volume: a sparse file of its
// size that takes writes over all of it.
func TestBlockVolume(t *testing.T) {
	m := newManager(t, 64*mib)
	v, err := m.Create("pvc-block", 4*mib, Block)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(v.Path)
	if err != nil || v.Mode != Block || st.Size() != 4*mib {
		t.Fatalf("Create = %+v (file %v, %v), want a 4 MiB block file", v, st, err)
	}
	if err := writeFile(v.Path, 4*mib); err != nil {
		t.Errorf("writing the whole block volume: %v", err)
	}
	v, err = m.Expand("pvc-block", 6*mib)
	if err != nil || v.Bytes != 6*mib {
		t.Fatalf("Expand = %+v, %v; want 6 MiB", v, err)
	}
	if err := writeFile(v.Path, 6*mib); err != nil {
		t.Errorf("writing the whole grown block volume: %v", err)
	}
	if got, err := m.Get("pvc-block"); err != nil || got != v {
		t.Errorf("Get = %+v, %v; want %+v", got, err, v)
	}
}

// TestCapacity fills the room for volumes: what is too large fails with
// ErrNoSpace and leaves nothing behind; deleting makes room again.
func TestCapacity(t *testing.T) {
	m := newManager(t, 20*mib)
	changes := 0
	m.cfg.Changed = func() { changes++ }
	c, err := m.Capacity()
	if err != nil || c.Total != 20*mib || c.Committed != 0 {
		t.Fatalf("Capacity = %+v, %v; want 20 MiB, none committed", c, err)
	}
	if _, err := m.Create("a", 12*mib, Filesystem); err != nil {
		t.Fatal(err)
	}
	_, err = m.Create("b", 12*mib, Filesystem)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "8.0 MiB of the 20.0 MiB") {
		t.Errorf("Create past the room = %v, want ErrNoSpace saying 8.0 MiB of the 20.0 MiB are left", err)
	}
	if _, err := m.Expand("a", 24*mib); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Expand past the room = %v, want ErrNoSpace", err)
	}
	vols, err := m.List()
	if err != nil || len(vols) != 1 || vols[0].Name != "a" {
		t.Errorf("List after the refusals = %+v, %v; want only a", vols, err)
	}
	if _, err := m.Create("b", 8*mib, Block); err != nil {
		t.Errorf("Create of what is left: %v", err)
	}
	if c, err := m.Capacity(); err != nil || c.Committed != 20*mib || c.Free() != 0 {
		t.Errorf("Capacity when full = %+v, %v; want 20 MiB committed", c, err)
	}
	if err := m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create("c", 12*mib, Filesystem); err != nil {
		t.Errorf("Create after a Delete made room: %v", err)
	}
	if _, err := m.Expand("c", 12*mib); err != nil {
		t.Errorf("Expand to the size it has: %v", err)
	}
	// a, b, the deletion of a, c; not the refusals nor the Expand that
	// changed nothing.
	if changes != 4 {
		t.Errorf("Changed was called %d times, want 4", changes)
	}
}

// TestLeftovers checks that New removes what a crash left in the middle
// of a creation or a deletion, and keeps the volumes.
func TestLeftovers(t *testing.T) {
	m := newManager(t, 64*mib)
	if _, err := m.Create("kept", mib, Filesystem); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{newPrefix + "half-made", delPrefix + "half-gone"} {
		if err := os.MkdirAll(filepath.Join(m.cfg.Root, d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	again, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "kept" {
		t.Errorf("after New: %v, want only kept", entries)
	}
	if _, err := again.Get("kept"); err != nil {
		t.Errorf("Get of the kept volume: %v", err)
	}
}

// TestNames refuses names that are not Kubernetes object names, which
// could leave the root.
func TestNames(t *testing.T) {
	for _, name := range []string{"", "..", "../x", "a/b", ".hidden", "Upper", "-x", strings.Repeat("a", 254)} {
		if err := checkName(name); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkName(%q) = %v, want ErrInvalid", name, err)
		}
	}
	for _, name := range []string{"a", "pvc-0b1c2d3e-4f5a-6b7c-8d9e-0f1a2b3c4d5e", "x.y-z", strings.Repeat("a", 253)} {
		if err := checkName(name); err != nil {
			t.Errorf("checkName(%q) = %v, want nil", name, err)
		}
	}
}

// TestQuotaOf checks the stated inode ratio and its floor, and the room
// a block volume's quota leaves for the file's own blocks.
func TestQuotaOf(t *testing.T) {
	if l := quotaOf(Filesystem, 64*mib); l != (fsquota.Limits{Bytes: 64 * mib, Inodes: 4096}) {
		t.Errorf("quota of a 64 MiB filesystem volume = %+v, want 64 MiB and 4096 inodes", l)
	}
	if l := quotaOf(Filesystem, mib); l.Inodes != minInodes {
		t.Errorf("quota of a 1 MiB filesystem volume = %+v, want the floor of %d inodes", l, minInodes)
	}
	if l := quotaOf(Block, 16*mib); l.Bytes != 16*mib+blockSlack {
		t.Errorf("quota of a 16 MiB block volume = %+v, want its size plus %d", l, blockSlack)
	}
}
