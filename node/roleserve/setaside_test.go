package roleserve

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSetAside checks that a removed member's data is moved beside its
// directory, replacing an older copy, and that the directory is left empty.
func TestSetAside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etcd")
	for _, round := range []string{"first", "second"} {
		if err := os.MkdirAll(filepath.Join(dir, "member", "wal"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "member", "wal", "0.wal"), []byte(round), 0o600); err != nil {
			t.Fatal(err)
		}
		aside, err := setAside(dir)
		if err != nil {
			t.Fatalf("setAside(%q), %s round: %v", dir, round, err)
		}
		if want := dir + ".removed"; aside != want {
			t.Errorf("setAside(%q) = %q, want %q", dir, aside, want)
		}
		b, err := os.ReadFile(filepath.Join(aside, "member", "wal", "0.wal"))
		if err != nil || string(b) != round {
			t.Errorf("%s round: data set aside = %q, %v; want %q", round, b, err, round)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 0 {
			t.Errorf("%s round: %s after setAside holds %d entries (%v), want an empty directory", round, dir, len(entries), err)
		}
	}
}
