package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFreshDir checks that a new run empties only a directory that an
// earlier run made, and refuses any other that holds something.
func TestFreshDir(t *testing.T) {
	base := t.TempDir()

	made := filepath.Join(base, "new")
	if err := freshDir(made); err != nil {
		t.Fatalf("freshDir(missing dir) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(made, dirMarker)); err != nil {
		t.Errorf("freshDir did not mark its directory: %v", err)
	}
	old := filepath.Join(made, "node0.img")
	if err := os.WriteFile(old, []byte("old disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := freshDir(made); err != nil {
		t.Fatalf("freshDir(earlier run's dir) = %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the earlier run's disk survived a new run: %v", err)
	}

	foreign := filepath.Join(base, "mine")
	keep := filepath.Join(foreign, "precious")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := freshDir(foreign); err == nil {
		t.Errorf("freshDir emptied a directory it did not make")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file of a foreign directory is gone: %v", err)
	}
}
