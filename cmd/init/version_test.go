package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOSRelease writes the os-release file and reads it back as the
// kubelet does (a shell-style KEY=value file): the pretty name is
// "Cairn <version>".
func TestOSRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "os-release")
	const v = "0.0.0-20261129041734-028f1a1fceb5.dirty"
	if err := writeOSRelease(path, v); err != nil {
		t.Fatal(err)
	}
	// Written again, it replaces the file.
	if err := writeOSRelease(path, v); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(b)) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			t.Fatalf("line %q is not KEY=value", line)
		}
		if uq, err := strconv.Unquote(value); err == nil {
			value = uq
		}
		got[key] = value
	}
	for key, want := range map[string]string{"NAME": "Cairn", "ID": "cairn", "VERSION_ID": v, "PRETTY_NAME": "Cairn " + v} {
		if got[key] != want {
			t.Errorf("%s = %q, want %q", key, got[key], want)
		}
	}
}
