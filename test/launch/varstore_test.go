package launch

import (
	"os"
	"path/filepath"
	"testing"
)

// TestVarStore checks where the firmware's variable store comes from,
// without qemu: a fresh copy of the template in the state directory, or
// the kept file, copied from the template only on first use.
func TestVarStore(t *testing.T) {
	template := filepath.Join(t.TempDir(), "VARS.fd")
	if err := os.WriteFile(template, []byte("template"), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	t.Run("fresh copy", func(t *testing.T) {
		dir := t.TempDir()
		path, err := varStore(dir, template, "")
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, "OVMF_VARS.fd"); path != want {
			t.Errorf("varStore = %q, want %q", path, want)
		}
		if got := read(path); got != "template" {
			t.Errorf("copy holds %q, want the template", got)
		}
	})

	t.Run("kept across launches", func(t *testing.T) {
		keep := filepath.Join(t.TempDir(), "new", "node0.vars.fd")
		// A launcher killed while copying left a partial copy.
		if err := os.MkdirAll(filepath.Dir(keep), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keep+".tmp", []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
		for launch := 1; launch <= 2; launch++ {
			path, err := varStore(t.TempDir(), template, keep)
			if err != nil {
				t.Fatalf("launch %d: %v", launch, err)
			}
			if path != keep {
				t.Errorf("launch %d: varStore = %q, want %q", launch, path, keep)
			}
			want := "template"
			if launch == 2 {
				want = "boot entries"
			}
			if got := read(path); got != want {
				t.Errorf("launch %d: store holds %q, want %q", launch, got, want)
			}
			// What the firmware writes while the node runs.
			if err := os.WriteFile(path, []byte("boot entries"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(keep + ".tmp"); !os.IsNotExist(err) {
			t.Errorf("temporary copy left behind: %v", err)
		}
	})

	t.Run("missing template", func(t *testing.T) {
		keep := filepath.Join(t.TempDir(), "node0.vars.fd")
		if _, err := varStore(t.TempDir(), "/nonexistent/VARS.fd", keep); err == nil {
			t.Fatal("varStore with a missing template succeeded")
		}
		if _, err := os.Stat(keep); !os.IsNotExist(err) {
			t.Errorf("a failed copy left %s: %v", keep, err)
		}
	})
}
