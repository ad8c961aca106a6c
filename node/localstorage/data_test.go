package localstorage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fileBlock is a block layer on files: the partition is a sparse file, and
// "decrypting" it with a key gives a file of its own per key, so a wrong
// key finds no filesystem, as with real dm-crypt.
type fileBlock struct {
	dir     string
	exists  bool
	mkfses  int
	mounted []string
	failFS  bool
	// cutFS makes mkfs fail after writing a superblock that says mkfs
	// is in progress, as a power cut during mkfs.xfs leaves it.
	cutFS bool
	// corrupt is set when openVerity found a slot that does not match;
	// verityOpened and verityClosed count openVerity and closeVerity
	// calls (system_test.go).
	corrupt                    bool
	verityOpened, verityClosed int
}

func (b *fileBlock) part() string { return filepath.Join(b.dir, "part") }

func (b *fileBlock) dataPartition(create bool) (string, uint64, error) {
	if !b.exists {
		if !create {
			return "", 0, errNoDataPartition
		}
		if err := os.WriteFile(b.part(), nil, 0o600); err != nil {
			return "", 0, err
		}
		os.Truncate(b.part(), 16<<20)
		b.exists = true
	}
	return b.part(), 16 << 20 / 512, nil
}

func (b *fileBlock) openCrypt(name, device string, offset, sectors uint64, key []byte) (string, error) {
	sum := sha256.Sum256(key)
	p := filepath.Join(b.dir, "mapped-"+hex.EncodeToString(sum[:4]))
	if _, err := os.Stat(p); err != nil {
		os.WriteFile(p, make([]byte, 4096), 0o600)
	}
	return p, nil
}

func (b *fileBlock) closeCrypt(string) error { return nil }

func (b *fileBlock) mkfs(_ context.Context, device string) error {
	if b.failFS {
		return errors.New("power cut")
	}
	b.mkfses++
	f, err := os.OpenFile(device, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	sb := make([]byte, 512)
	copy(sb, xfsMagic)
	if b.cutFS {
		sb[xfsInProgress] = 1
	}
	if _, err = f.WriteAt(sb, 0); err != nil {
		return err
	}
	if b.cutFS {
		return errors.New("power cut")
	}
	return nil
}

func (b *fileBlock) mount(source, target, fstype string, _ uintptr, data string) error {
	b.mounted = append(b.mounted, source+" "+target+" "+fstype+" "+data)
	return nil
}

func newTestStorage(t *testing.T) (*Storage, *fileBlock) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(Config{Root: filepath.Join(dir, "root")})
	if err != nil {
		t.Fatal(err)
	}
	b := &fileBlock{dir: dir}
	s.block = b
	return s, b
}

func key(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

func partHash(t *testing.T, b *fileBlock) [32]byte {
	data, err := os.ReadFile(b.part())
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

func TestDataKey(t *testing.T) {
	node, cluster := make([]byte, KeySize), make([]byte, KeySize)
	for i := range node {
		node[i], cluster[i] = byte(i), byte(0xff-i*3)
	}
	got, err := dataKey(node, cluster)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != node[i]^cluster[i] || got[i]^cluster[i] != node[i] {
			t.Fatalf("dataKey byte %d = %#x, want %#x", i, got[i], node[i]^cluster[i])
		}
	}
	for _, c := range []struct{ n, c []byte }{{node[:32], cluster}, {node, nil}, {node, node}} {
		if _, err := dataKey(c.n, c.c); err == nil {
			t.Errorf("dataKey(%d bytes, %d bytes) succeeded, want an error", len(c.n), len(c.c))
		}
	}
}

func TestMountNewThenExisting(t *testing.T) {
	s, b := newTestStorage(t)
	ctx := context.Background()
	if err := s.MountExisting(key(1), key(2)); !errors.Is(err, errNoDataPartition) {
		t.Errorf("MountExisting(no partition) = %v, want errNoDataPartition", err)
	}
	if err := s.MountNew(ctx, key(1), key(2)); err != nil {
		t.Fatalf("MountNew: %v", err)
	}
	if b.mkfses != 1 || len(b.mounted) != 1 || !strings.HasSuffix(b.mounted[0], s.Root.Data.FullPath()+" xfs prjquota") {
		t.Errorf("after MountNew: %d mkfs, mounts %q", b.mkfses, b.mounted)
	}
	if err := s.MountExisting(key(1), key(2)); err != nil {
		t.Errorf("MountExisting(same keys): %v", err)
	}
	// The same data key from other halves opens it as well.
	if err := s.MountExisting(key(3), key(3^1^2)); err != nil {
		t.Errorf("MountExisting(other halves, same XOR): %v", err)
	}
	before := partHash(t, b)
	if err := s.MountExisting(key(1), key(4)); !errors.Is(err, ErrWrongKey) {
		t.Errorf("MountExisting(wrong key) = %v, want ErrWrongKey", err)
	}
	if err := s.MountExistingInsecure(); err == nil {
		t.Errorf("MountExistingInsecure(encrypted partition) succeeded")
	}
	if partHash(t, b) != before || b.mkfses != 1 {
		t.Errorf("a failed MountExisting changed the partition or ran mkfs (%d)", b.mkfses)
	}
	// A retried MountNew with the same keys keeps the filesystem.
	if err := s.MountNew(ctx, key(1), key(2)); err != nil || b.mkfses != 1 {
		t.Errorf("MountNew again (same keys) = %v with %d mkfs, want nil and 1", err, b.mkfses)
	}
	// A new enrolment with new keys replaces it.
	if err := s.MountNew(ctx, key(5), key(9)); err != nil || b.mkfses != 2 {
		t.Errorf("MountNew(new keys) = %v with %d mkfs, want nil and 2", err, b.mkfses)
	}
	if err := s.MountExisting(key(1), key(2)); !errors.Is(err, ErrWrongKey) {
		t.Errorf("MountExisting(old keys after re-enrolment) = %v, want ErrWrongKey", err)
	}
}

func TestPowerCutDuringMkfs(t *testing.T) {
	s, b := newTestStorage(t)
	ctx := context.Background()
	b.failFS = true
	if err := s.MountNew(ctx, key(1), key(2)); err == nil {
		t.Fatalf("MountNew with a failing mkfs succeeded")
	}
	before := partHash(t, b)
	err := s.MountExisting(key(1), key(2))
	if err == nil || !strings.Contains(err.Error(), "never set up") {
		t.Errorf("MountExisting(unfinished) = %v, want a never-set-up error", err)
	}
	if partHash(t, b) != before {
		t.Errorf("MountExisting changed an unfinished partition")
	}
	b.failFS = false
	if err := s.MountNew(ctx, key(1), key(2)); err != nil {
		t.Errorf("MountNew after the cut: %v", err)
	}
	if err := s.MountExisting(key(1), key(2)); err != nil {
		t.Errorf("MountExisting after completion: %v", err)
	}
}

func TestCorruptHeaderIsNeverFormatted(t *testing.T) {
	s, b := newTestStorage(t)
	if err := s.MountNew(context.Background(), key(1), key(2)); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(b.part(), os.O_WRONLY, 0)
	f.WriteAt([]byte{0xff}, 20) // inside the key check, CRC now fails
	f.Close()
	if err := s.MountExisting(key(1), key(2)); err == nil || b.mkfses != 1 {
		t.Errorf("MountExisting(corrupt header) = %v with %d mkfs, want an error and 1", err, b.mkfses)
	}
}

func TestInsecure(t *testing.T) {
	s, b := newTestStorage(t)
	if err := s.MountExistingInsecure(); !errors.Is(err, errNoDataPartition) {
		t.Errorf("MountExistingInsecure(no partition) = %v, want errNoDataPartition", err)
	}
	if err := s.MountNewInsecure(context.Background()); err != nil {
		t.Fatalf("MountNewInsecure: %v", err)
	}
	if err := s.MountExistingInsecure(); err != nil {
		t.Errorf("MountExistingInsecure: %v", err)
	}
	err := s.MountExisting(key(1), key(2))
	if err == nil || !strings.Contains(err.Error(), "not encrypted") {
		t.Errorf("MountExisting(insecure partition) = %v, want a not-encrypted error", err)
	}
	if b.mkfses != 1 {
		t.Errorf("%d mkfs runs, want 1", b.mkfses)
	}
}

// TestInsecurePowerCutDuringMkfs cuts mkfs.xfs short on an insecure
// partition, whose only mark of being set up is the XFS superblock: the
// superblock of the unfinished filesystem is on the disk, but says mkfs is
// in progress. It must count as never set up: MountExistingInsecure
// refuses it without writing, and the next MountNewInsecure makes the
// filesystem again instead of mounting the unfinished one.
func TestInsecurePowerCutDuringMkfs(t *testing.T) {
	s, b := newTestStorage(t)
	ctx := context.Background()
	b.cutFS = true
	if err := s.MountNewInsecure(ctx); err == nil {
		t.Fatalf("MountNewInsecure with mkfs cut short succeeded")
	}
	before := partHash(t, b)
	err := s.MountExistingInsecure()
	if err == nil || !strings.Contains(err.Error(), "never set up") {
		t.Errorf("MountExistingInsecure(unfinished mkfs) = %v, want a never-set-up error", err)
	}
	if partHash(t, b) != before || len(b.mounted) != 0 {
		t.Errorf("MountExistingInsecure touched an unfinished partition (mounts %q)", b.mounted)
	}
	b.cutFS = false
	if err := s.MountNewInsecure(ctx); err != nil {
		t.Fatalf("MountNewInsecure after the cut: %v", err)
	}
	if b.mkfses != 2 || len(b.mounted) != 1 {
		t.Errorf("after the cut MountNewInsecure ran mkfs %d times in all and mounted %q, want 2 and one mount", b.mkfses, b.mounted)
	}
	// Finished, it is kept by a MountNewInsecure that comes again (a cut
	// after mkfs and before enrolment sealed) and opened by
	// MountExistingInsecure.
	if err := s.MountNewInsecure(ctx); err != nil || b.mkfses != 2 {
		t.Errorf("MountNewInsecure again = %v with %d mkfs, want nil and 2", err, b.mkfses)
	}
	if err := s.MountExistingInsecure(); err != nil {
		t.Errorf("MountExistingInsecure after completion: %v", err)
	}
}

// TestRealMkfs runs the mkfs.xfs the node image carries, with the node's
// flags, on a file, and wants the superblock check to see it, finished.
func TestRealMkfs(t *testing.T) {
	bin, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		t.Skip("mkfs.xfs is not installed on this machine")
	}
	s, err := New(Config{Root: t.TempDir(), MkfsXFS: bin})
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(t.TempDir(), "fs.img")
	os.WriteFile(dev, nil, 0o600)
	os.Truncate(dev, 320<<20)
	if err := s.block.mkfs(context.Background(), dev); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	if ok, err := hasXFS(dev); !ok || err != nil {
		t.Errorf("hasXFS(fresh XFS) = %v, %v, want true", ok, err)
	}
	if st, _, err := readState(dev); st != stateInsecure || err != nil {
		t.Errorf("readState(fresh XFS) = %v, %v, want stateInsecure: the in-progress flag is not where it is looked for", st, err)
	}
}
