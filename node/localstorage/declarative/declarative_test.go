package declarative

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type leaf struct {
	Directory
	Secret File `file:"secret.pb"`
}

type tree struct {
	Directory
	Sub   leaf      `dir:"sub"`
	Plain Directory `dir:"plain"`
	Top   File      `file:"top"`
}

func TestPlacement(t *testing.T) {
	var tr tree
	if err := Place(&tr, "/mnt/x/"); err != nil {
		t.Fatalf("Place: %v", err)
	}
	for _, c := range []struct{ got, want string }{
		{tr.FullPath(), "/mnt/x"},
		{tr.Sub.FullPath(), "/mnt/x/sub"},
		{tr.Sub.Secret.FullPath(), "/mnt/x/sub/secret.pb"},
		{tr.Plain.FullPath(), "/mnt/x/plain"},
		{tr.Top.FullPath(), "/mnt/x/top"},
	} {
		if c.got != c.want {
			t.Errorf("FullPath() = %q, want %q", c.got, c.want)
		}
	}
}

func TestPlaceRejects(t *testing.T) {
	type untagged struct {
		Directory
		F File
	}
	type badName struct {
		Directory
		F File `file:"../escape"`
	}
	type wrongType struct {
		Directory
		F string `file:"x"`
	}
	type noDir struct {
		F File `file:"x"`
	}
	for name, v := range map[string]any{
		"untagged": &untagged{}, "bad name": &badName{}, "wrong type": &wrongType{},
		"no directory": &noDir{}, "not a pointer": tree{},
	} {
		if err := Place(v, "/x"); err == nil {
			t.Errorf("Place(%s) succeeded, want an error", name)
		}
	}
}

func TestAtomicWrite(t *testing.T) {
	var tr tree
	if err := Place(&tr, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	f := &tr.Sub.Secret
	if _, err := f.Read(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read(absent) = %v, want ErrNotExist", err)
	}
	if err := f.Write([]byte("x")); err == nil {
		t.Errorf("Write into a missing directory succeeded")
	}
	if err := tr.Sub.MkdirAll(0o700); err != nil {
		t.Fatal(err)
	}
	for _, content := range [][]byte{[]byte("first"), []byte("second, longer"), {}} {
		if err := f.Write(content); err != nil {
			t.Fatalf("Write(%q): %v", content, err)
		}
		got, err := f.Read()
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("Read() = %q, %v, want %q", got, err, content)
		}
	}
	st, err := os.Stat(f.FullPath())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	left, _ := filepath.Glob(filepath.Join(tr.Sub.FullPath(), ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %q", left)
	}
	if ok, err := f.Exists(); !ok || err != nil {
		t.Errorf("Exists() = %v, %v, want true", ok, err)
	}
	if err := f.Remove(); err != nil {
		t.Errorf("Remove: %v", err)
	}
	if ok, _ := f.Exists(); ok {
		t.Errorf("Exists() after Remove = true")
	}
}

// TestWriteKeepsOldOnFailure: a write that cannot finish leaves the old
// content readable.
func TestWriteKeepsOldOnFailure(t *testing.T) {
	var tr tree
	dir := t.TempDir()
	if err := Place(&tr, dir); err != nil {
		t.Fatal(err)
	}
	if err := tr.Top.Write([]byte("old")); err != nil {
		t.Fatal(err)
	}
	// Replace the target by a non-empty directory: rename must fail.
	os.Remove(tr.Top.FullPath())
	os.MkdirAll(filepath.Join(tr.Top.FullPath(), "blocker"), 0o700)
	if err := tr.Top.Write([]byte("new")); err == nil {
		t.Errorf("Write over a directory succeeded")
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind after a failed write: %q", left)
	}
}
