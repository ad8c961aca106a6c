package initramfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cairn.dev/cairn/build/elfdeps"
)

func TestAddHostFiles(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libx.so.1.2")
	if err := os.WriteFile(lib, []byte("library"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := &Archive{entries: map[string]Entry{}}
	size, err := a.AddHostFiles([]elfdeps.File{
		{Path: lib, Mode: 0o644},
		{Path: filepath.Join(dir, "libx.so.1"), Link: "libx.so.1.2"},
	})
	if err != nil {
		t.Fatalf("AddHostFiles: %v", err)
	}
	if size != int64(len("library")) {
		t.Errorf("AddHostFiles added %d bytes, want %d", size, len("library"))
	}
	var buf bytes.Buffer
	if err := a.Write(&buf); err != nil {
		t.Fatalf("Write: %v", err)
	}
	entries, err := readNewc(buf.Bytes())
	if err != nil {
		t.Fatalf("reading the archive back: %v", err)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	base := strings.TrimPrefix(dir, "/")
	for name, want := range map[string]Entry{
		base + "/libx.so.1.2": {Mode: TypeRegular | 0o644, Data: []byte("library")},
		base + "/libx.so.1":   {Mode: TypeSymlink | 0o777, Data: []byte("libx.so.1.2")},
		base:                  {Mode: TypeDir | 0o755},
	} {
		e, ok := got[name]
		if !ok {
			t.Errorf("archive has no %s", name)
			continue
		}
		if e.Mode != want.Mode || !bytes.Equal(e.Data, want.Data) {
			t.Errorf("%s = mode %#o data %q, want mode %#o data %q", name, e.Mode, e.Data, want.Mode, want.Data)
		}
	}
}

func TestAddHostFilesMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	a := New()
	if _, err := a.AddHostFiles([]elfdeps.File{{Path: missing, Mode: 0o755}}); err == nil ||
		!strings.Contains(err.Error(), missing) {
		t.Errorf("AddHostFiles(%s) = %v, want an error naming it", missing, err)
	}
}

// TestHostBinariesResolve checks that every carried binary and its
// libraries are found on this machine, as make image will need them.
func TestHostBinariesResolve(t *testing.T) {
	for _, b := range HostBinaries {
		if b.Why == "" || !filepath.IsAbs(b.Path) {
			t.Errorf("HostBinaries entry %+v: want an absolute path and a reason", b)
		}
	}
	paths := HostBinaryPaths(HostBinaries)
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed on this machine (build/deps.sh installs it): %v", p, err)
		}
	}
	if _, err := elfdeps.Resolve(paths); err != nil {
		t.Errorf("elfdeps.Resolve(%q): %v", paths, err)
	}
}
