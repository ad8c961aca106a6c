package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCopyTree copies a tree as the root's move does, and checks the copy
// entry by entry: kind, permissions (set-group-ID and sticky bits too),
// contents and link targets, and that what it was told to skip, a
// directory and a file, is not there. Then emptyDir empties the source.
func TestCopyTree(t *testing.T) {
	src := t.TempDir()
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"lib/modules", 0o755}, {"tmp", 0o1777}, {"etc", 0o2750}, {"newroot", 0o755}, {"newroot/inside", 0o755}} {
		if err := os.MkdirAll(filepath.Join(src, d.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(src, d.path), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"init": "the binary", "lib/modules/a.ko": strings.Repeat("module ", 100000), "etc/empty": ""}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(src, "init"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib", filepath.Join(src, "lib64")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/system/bin/missing", filepath.Join(src, "dangling")); err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	skip := filepath.Join(src, "newroot")
	if err := copyTree(src, dst, skip, filepath.Join(src, "init")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"newroot", "init"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); err == nil {
			t.Errorf("%s was copied, and should have been skipped", name)
		}
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch rel {
		case "newroot":
			return filepath.SkipDir
		case "init":
			return nil
		}
		want, err := os.Lstat(path)
		if err != nil {
			return err
		}
		got, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Errorf("%s: not copied: %v", rel, err)
			return nil
		}
		if rel != "." && got.Mode() != want.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, got.Mode(), want.Mode())
		}
		switch {
		case want.Mode().IsRegular():
			g, _ := os.ReadFile(filepath.Join(dst, rel))
			if string(g) != files[rel] {
				t.Errorf("%s: %d bytes copied, want %d", rel, len(g), len(files[rel]))
			}
		case want.Mode()&fs.ModeSymlink != 0:
			g, _ := os.Readlink(filepath.Join(dst, rel))
			w, _ := os.Readlink(path)
			if g != w {
				t.Errorf("%s: links to %q, want %q", rel, g, w)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := emptyDir(src); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("after emptyDir: %v, want nothing", left)
	}
}

// TestCopyTreeRefuses checks that a file the root should not hold (a
// FIFO) stops the copy, with the file named.
func TestCopyTreeRefuses(t *testing.T) {
	src := t.TempDir()
	fifo := filepath.Join(src, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	err := copyTree(src, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), fifo) {
		t.Errorf("copyTree of a FIFO: %v, want an error naming %s", err, fifo)
	}
}
