package system

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// staticProgram builds a Go program that does nothing, static, and
// returns its path: a stand-in for the payload's programs.
func staticProgram(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not in PATH")
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module nothing\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "nothing")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a static program: %v\n%s", err, b)
	}
	return out
}

// payloadDir makes a payload directory of a static program, prog, and a
// link to it, alias.
func payloadDir(t *testing.T, prog string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prog"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("prog", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStagePayload stages a program and a link to it, and the same again
// in a directory of the payload, as the worker's build of hyperkube is.
func TestStagePayload(t *testing.T) {
	prog := staticProgram(t)
	src := payloadDir(t, prog)
	if err := os.Rename(payloadDir(t, prog), filepath.Join(src, "worker")); err != nil {
		t.Fatal(err)
	}
	stage := t.TempDir()
	files, size, err := stagePayload(stage, src, KubernetesBin)
	if err != nil {
		t.Fatalf("stagePayload: %v", err)
	}
	want, _ := os.ReadFile(prog)
	if size != 2*int64(len(want)) {
		t.Errorf("stagePayload size = %d, want %d", size, 2*len(want))
	}
	wantFiles := []string{"alias", "prog", "worker/alias", "worker/prog"}
	for i, f := range wantFiles {
		wantFiles[i] = filepath.Join(src, f)
	}
	if got := strings.Join(files, " "); got != strings.Join(wantFiles, " ") {
		t.Errorf("stagePayload files = %q, want %q", got, wantFiles)
	}
	for _, dir := range []string{filepath.Join(stage, KubernetesBin), filepath.Join(stage, KubernetesBin, "worker")} {
		if got, err := os.ReadFile(filepath.Join(dir, "prog")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("staged %s/prog: %d bytes, %v; want %d bytes", dir, len(got), err, len(want))
		}
		if st, err := os.Stat(filepath.Join(dir, "prog")); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("staged %s/prog: %v, %v; want mode 0755", dir, st.Mode(), err)
		}
		if target, err := os.Readlink(filepath.Join(dir, "alias")); err != nil || target != "prog" {
			t.Errorf("staged %s/alias links to %q, %v; want prog", dir, target, err)
		}
	}
}

// TestStagePayloadRefuses checks that what could not run from the system
// partition on the node fails the build, named.
func TestStagePayloadRefuses(t *testing.T) {
	prog := staticProgram(t)
	for _, tc := range []struct {
		name string
		add  func(dir string) error
		want string
	}{
		{"dynamic program", func(dir string) error {
			b, err := os.ReadFile("/bin/sh")
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "sh"), b, 0o755)
		}, "sh is dynamically linked"},
		{"not a program", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\n"), 0o755)
		}, "script"},
		{"absolute link", func(dir string) error {
			return os.Symlink("/usr/bin/prog", filepath.Join(dir, "abs"))
		}, "abs points to /usr/bin/prog"},
		{"dangling link", func(dir string) error {
			return os.Symlink("gone", filepath.Join(dir, "dangling"))
		}, "dangling points to gone"},
		{"link out of its directory", func(dir string) error {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				return err
			}
			return os.Symlink("../prog", filepath.Join(dir, "sub", "up"))
		}, "up points to ../prog"},
		{"dynamic program in a directory", func(dir string) error {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				return err
			}
			b, err := os.ReadFile("/bin/sh")
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "sub", "sh"), b, 0o755)
		}, "sub/sh is dynamically linked"},
		{"neither a file, a link nor a directory", func(dir string) error {
			return unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600)
		}, "fifo is neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := payloadDir(t, prog)
			if err := tc.add(src); err != nil {
				t.Fatal(err)
			}
			_, _, err := stagePayload(t.TempDir(), src, KubernetesBin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("stagePayload = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestBuildKubernetes checks that the image carries a payload at
// KubernetesBin, links as links.
func TestBuildKubernetes(t *testing.T) {
	needTools(t, "mkfs.erofs", "fsck.erofs")
	prog := staticProgram(t)
	src := payloadDir(t, prog)
	path := filepath.Join(t.TempDir(), "system.img")
	img, err := Build(path, Config{Binaries: HostBinaryPaths(HostBinaries), Kubernetes: src, TempDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fs := filepath.Join(t.TempDir(), "fs.erofs")
	if err := os.WriteFile(fs, b[:img.FilesystemSize], 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command("fsck.erofs", "--extract="+dir, fs).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs --extract: %v\n%s", err, out)
	}
	want, _ := os.ReadFile(prog)
	bin := filepath.Join(dir, KubernetesBin)
	if got, err := os.ReadFile(filepath.Join(bin, "prog")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("prog in the image: %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	if target, err := os.Readlink(filepath.Join(bin, "alias")); err != nil || target != "prog" {
		t.Errorf("alias in the image links to %q, %v; want prog", target, err)
	}
	if img.KubernetesSize != int64(len(want)) {
		t.Errorf("KubernetesSize = %d, want %d", img.KubernetesSize, len(want))
	}
}
