package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGitVersion builds the version of a fresh repository as it is
// committed, tagged and changed.
func TestGitVersion(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2025-03-04T05:06:07Z", "GIT_COMMITTER_DATE=2025-03-04T05:06:07Z",
			"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "f")
	run("commit", "-q", "-m", "one")
	b, err := gitVersion(dir)
	if err != nil {
		t.Fatal(err)
	}
	commitVersion := "0.0.0-20250304050607-" + b.commit[:12]
	if b.version.String() != commitVersion || len(b.commit) != 40 {
		t.Errorf("gitVersion of an untagged commit = %s, %s; want %s", b.version, b.commit, commitVersion)
	}
	run("tag", "v1.2.3")
	run("tag", "v1.10.0")
	run("tag", "not-a-release")
	for _, tc := range []struct {
		change func()
		want   string
	}{
		{func() {}, "1.10.0"},
		{func() { os.WriteFile(filepath.Join(dir, "new"), nil, 0o644) }, commitVersion + ".dirty"},
	} {
		tc.change()
		b, err := gitVersion(dir)
		if err != nil || b.version.String() != tc.want {
			t.Errorf("gitVersion = %s, %v; want %s", b.version, err, tc.want)
		}
	}
}
