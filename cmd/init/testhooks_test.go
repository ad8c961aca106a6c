package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/cmdline"
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

// TestProductionIgnoresTestFlags checks that the production build reads
// no test flag and names them all in one note.
func TestProductionIgnoresTestFlags(t *testing.T) {
	if testHooksBuilt {
		t.Skip("this is the test build (tag cairntest); TestParseTestFlags covers it")
	}
	f, notes := parseFlags(cmdline.Parse("cairn.test.root-fail cairn.test.echo=7900 cairn.test.storage_keys=ab:cd cairn.log=warning"))
	if f.test != (testFlags{}) || len(notes) != 1 {
		t.Fatalf("parseFlags(test flags) = %+v, %q, want no test flag and one note", f, notes)
	}
	for _, want := range []string{"cairn.test.root-fail", "cairn.test.echo", "cairn.test.storage_keys", "production"} {
		if !strings.Contains(notes[0], want) {
			t.Errorf("note %q does not name %q", notes[0], want)
		}
	}
	if f.test.rootFailure() != nil || len(f.test.children(nil, nil)) != 0 {
		t.Errorf("the production build acts on test flags")
	}
}
