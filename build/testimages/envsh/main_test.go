package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvsh runs envsh, linked as sh, on this machine's busybox and bash:
// it is busybox's ash, with ash's message for a file it cannot create,
// and bash when the environment has names that are not identifiers,
// which its commands then see.
func TestEnvsh(t *testing.T) {
	for _, p := range []string{busybox, bash} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs busybox and bash (build/deps.sh conformance installs busybox): %v", err)
		}
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "envsh")
	if out, err := exec.Command("go", "build", "-o", prog, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	sh := filepath.Join(dir, "sh")
	if err := os.Symlink(prog, sh); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, script string) string {
		t.Helper()
		cmd := exec.Command(sh, "-c", script)
		cmd.Env = env
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	missing := filepath.Join(dir, "missing", "file")
	if got, want := run([]string{"PATH=/usr/bin:/bin"}, "echo test > "+missing), sh+": can't create "+missing+": nonexistent directory\n"; got != want {
		t.Errorf("sh writing to a missing directory printed %q, want ash's %q", got, want)
	}
	if got := run([]string{"PATH=/usr/bin:/bin"}, "echo $BASH_VERSION"); got != "\n" {
		t.Errorf("sh without odd names ran bash %q, want ash", got)
	}
	got := run([]string{"PATH=/usr/bin:/bin", "1-data-1=value-1", "$_-data-1=value-1", "#@!data-1=value-1", "ABC_data=x"}, "env")
	for _, w := range []string{"1-data-1=value-1\n", "$_-data-1=value-1\n", "#@!data-1=value-1\n", "ABC_data=x\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("sh -c env with names that are not identifiers printed %q, want %q among them", got, w)
		}
	}
	for name, want := range map[string]bool{"PATH": true, "_x1": true, "a": true, "": false, "1-a": false, "$_-a": false, "a-b": false, "9": false} {
		if identifier(name) != want {
			t.Errorf("identifier(%q) = %v, want %v", name, !want, want)
		}
	}
}
