package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cairn.dev/cairn/node/testhooks"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
)

// TestProductionHasNoTestHooks builds /init as make image does and as make
// test-image does, and checks that only the test build carries the names
// of the test hooks: the production binary cannot be talked into them,
// whatever its command line says.
func TestProductionHasNoTestHooks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds /init twice; skipped under -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build /init with: %v", err)
	}
	hooks := []string{"root-fail", "storage-keys", "test-data-partition-set-up", "test-echo", "test-dial", "stop-at", "test-point-reached"}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		tags  []string
		hooks bool
	}{
		{"production", nil, false},
		{"test image", []string{"-tags", "cairntest"}, true},
	} {
		bin := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		args := append([]string{"build", "-trimpath", "-o", bin}, tc.tags...)
		cmd := exec.Command(goTool, append(args, ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the %s /init: %v\n%s", tc.name, err, out)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hooks {
			if has := bytes.Contains(b, []byte(h)); has != tc.hooks {
				t.Errorf("the %s /init contains %q: %v, want %v", tc.name, h, has, tc.hooks)
			}
		}
	}
}

// TestProductionIgnoresTestFlags checks that the production /init passes
// on node/testhooks' note about the test flags it ignores, and still
// reads its own flags.
func TestProductionIgnoresTestFlags(t *testing.T) {
	if testhooks.Built {
		t.Skip("this is the test build (tag cairntest); node/testhooks' TestParseTestFlags covers it")
	}
	f, notes := parseFlags(cmdline.Parse("cairn.test.root-fail cairn.log=warning"))
	if f.logSeverity != logtree.WARNING || len(notes) != 1 || !strings.Contains(notes[0], "cairn.test.root-fail") {
		t.Errorf("parseFlags(a test flag, cairn.log=warning) = %+v, %q; want WARNING and one note naming the test flag", f, notes)
	}
}
