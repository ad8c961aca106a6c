package system

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/build/elfdeps"
	"cairn.dev/cairn/build/modules"
	"cairn.dev/cairn/pkg/verity"
)

// needTools skips a test when a Debian tool it needs is missing.
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (build/deps.sh installs it)", tool)
		}
	}
	for _, p := range HostBinaryPaths(HostBinaries) {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed on this machine (build/deps.sh installs it)", p)
		}
	}
}

// build builds the system image of HostBinaries into a directory of its
// own, staging in another, whose path it returns too.
func build(t *testing.T) (string, *Image, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "system.img")
	tmp := t.TempDir()
	img, err := Build(path, Config{Binaries: HostBinaryPaths(HostBinaries), Modules: testModules, TempDir: tmp})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return path, img, tmp
}

// testModules stands for the carried module set of a kernel.
var testModules = &modules.Set{
	Release: "6.1.0-test",
	Modules: []string{"kernel/fs/xfs/xfs.ko"},
	Files: []modules.File{
		{Name: "kernel/fs/xfs/xfs.ko", Data: []byte("\x7fELF xfs")},
		{Name: "modules.dep", Data: []byte("kernel/fs/xfs/xfs.ko:\n")},
	},
}

// TestBuildReproducible builds the image twice, a second apart (so every
// staged file has another modification time) and from staging
// directories of other names: the bytes must be the same, and no staging
// path may show in them.
func TestBuildReproducible(t *testing.T) {
	needTools(t, "mkfs.erofs")
	path1, img1, tmp1 := build(t)
	time.Sleep(1100 * time.Millisecond)
	path2, img2, _ := build(t)
	b1, err := os.ReadFile(path1)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := os.ReadFile(path2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Errorf("two builds of the same inputs differ (%d and %d bytes)", len(b1), len(b2))
	}
	if diff := cmp.Diff(img1, img2); diff != "" {
		t.Errorf("two builds report differently (-first +second):\n%s", diff)
	}
	if bytes.Contains(b1, []byte("cairn-system-")) || bytes.Contains(b1, []byte(tmp1)) {
		t.Errorf("the image holds the staging directory's path")
	}
	if int64(len(b1)) != img1.FilesystemSize+img1.TreeSize {
		t.Errorf("image of %d bytes, want filesystem %d + tree %d", len(b1), img1.FilesystemSize, img1.TreeSize)
	}
}

// TestBuildContent checks the image with Debian's own tools: fsck.erofs
// unpacks the filesystem, which must hold every host file as it is on
// this machine, and veritysetup verifies the data against the tree after
// it with the parameters Build reports.
func TestBuildContent(t *testing.T) {
	needTools(t, "mkfs.erofs", "fsck.erofs", "veritysetup")
	path, img, _ := build(t)
	if img.FilesystemSize%verity.BlockSize != 0 || img.Params.HashOffset != uint64(img.FilesystemSize) {
		t.Errorf("filesystem of %d bytes, hash offset %d: want whole blocks and the tree right after",
			img.FilesystemSize, img.Params.HashOffset)
	}
	if err := img.Params.Check(); err != nil {
		t.Errorf("Params: %v", err)
	}

	fs := filepath.Join(t.TempDir(), "fs.erofs")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fs, b[:img.FilesystemSize], 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command("fsck.erofs", "--extract="+dir, fs).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v\n%s", err, out)
	}
	closure, err := elfdeps.Resolve(HostBinaryPaths(HostBinaries))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range closure.Files {
		got := filepath.Join(dir, f.Path)
		if f.Link != "" {
			if target, err := os.Readlink(got); err != nil || target != f.Link {
				t.Errorf("%s: link to %q, %v; want a link to %q", f.Path, target, err, f.Link)
			}
			continue
		}
		want, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(got)
		if err != nil || !bytes.Equal(data, want) {
			t.Errorf("%s in the image: %d bytes, %v; want the host's %d bytes", f.Path, len(data), err, len(want))
		}
		if st, err := os.Lstat(got); err == nil && st.Mode().Perm() != f.Mode.Perm() {
			t.Errorf("%s has mode %v in the image, want %v", f.Path, st.Mode().Perm(), f.Mode.Perm())
		}
	}

	for _, f := range testModules.Files {
		got := filepath.Join(dir, ModulesDir, testModules.Release, f.Name)
		data, err := os.ReadFile(got)
		if err != nil || !bytes.Equal(data, f.Data) {
			t.Errorf("module file %s in the image: %q, %v; want %q", f.Name, data, err, f.Data)
		}
		if st, err := os.Lstat(got); err == nil && st.Mode().Perm() != 0o644 {
			t.Errorf("module file %s has mode %v in the image, want 0644", f.Name, st.Mode().Perm())
		}
	}

	p := img.Params
	out, err := exec.Command("veritysetup", "verify", "--no-superblock",
		"--hash-offset="+fmt.Sprint(p.HashOffset), "--data-blocks="+fmt.Sprint(p.DataBlocks),
		"--salt="+hex.EncodeToString(p.Salt), path, path, hex.EncodeToString(p.RootHash)).CombinedOutput()
	if err != nil {
		t.Errorf("veritysetup verify with the reported parameters: %v\n%s", err, out)
	}
	b[img.FilesystemSize/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.img")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("veritysetup", "verify", "--no-superblock",
		"--hash-offset="+fmt.Sprint(p.HashOffset), "--data-blocks="+fmt.Sprint(p.DataBlocks),
		"--salt="+hex.EncodeToString(p.Salt), bad, bad, hex.EncodeToString(p.RootHash)).Run(); err == nil {
		t.Errorf("veritysetup verify accepted the image with one bit flipped")
	}
}

// TestHostBinariesResolve checks that every carried binary and its
// libraries are found on this machine, as make image will need them, and
// that the loader on the node will find them through LoaderLinks.
func TestHostBinariesResolve(t *testing.T) {
	for _, b := range HostBinaries {
		if b.Why == "" || !filepath.IsAbs(b.Path) {
			t.Errorf("HostBinaries entry %+v: want an absolute path and a reason", b)
		}
	}
	needTools(t)
	paths := HostBinaryPaths(HostBinaries)
	c, err := elfdeps.Resolve(paths)
	if err != nil {
		t.Fatalf("elfdeps.Resolve(%q): %v", paths, err)
	}
	if err := checkLoaderLinks(c, paths); err != nil {
		t.Errorf("checkLoaderLinks: %v", err)
	}
}

func TestCheckLoaderLinks(t *testing.T) {
	c := &elfdeps.Closure{Files: []elfdeps.File{
		{Path: "/usr/sbin/tool"},
		{Path: "/lib64/ld-linux-x86-64.so.2", Link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{Path: "/lib/x86_64-linux-gnu/libc.so.6"},
	}}
	if err := checkLoaderLinks(c, []string{"/usr/sbin/tool"}); err != nil {
		t.Errorf("checkLoaderLinks: %v", err)
	}
	c.Files = append(c.Files, elfdeps.File{Path: "/opt/lib/libodd.so"})
	if err := checkLoaderLinks(c, []string{"/usr/sbin/tool"}); err == nil || !strings.Contains(err.Error(), "/opt/lib/libodd.so") {
		t.Errorf("checkLoaderLinks with a library in /opt = %v, want an error naming it", err)
	}
}

func TestCmdline(t *testing.T) {
	p := verity.Params{RootHash: bytes.Repeat([]byte{0xab}, 32), Salt: []byte{1}, DataBlocks: 2, HashOffset: 8192}
	got := Cmdline("console=ttyS0 panic=-1\n", p)
	want := "console=ttyS0 panic=-1 cairn.verity=" + strings.Repeat("ab", 32) + ",01,2,8192"
	if got != want {
		t.Errorf("Cmdline = %q, want %q", got, want)
	}
}
