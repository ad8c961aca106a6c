package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteDepfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "system.d")
	files := []string{"/lib64/ld-linux-x86-64.so.2", "/usr/sbin/mkfs.xfs"}
	if err := writeDepfile(path, "out/system.img out/cmdline", files); err != nil {
		t.Fatalf("writeDepfile: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "out/system.img out/cmdline: \\\n  /lib64/ld-linux-x86-64.so.2 \\\n  /usr/sbin/mkfs.xfs\n" +
		"/lib64/ld-linux-x86-64.so.2:\n/usr/sbin/mkfs.xfs:\n"
	if string(got) != want {
		t.Errorf("depfile = %q, want %q", got, want)
	}
	for _, bad := range []string{"/lib/with space.so", "/lib/a:b.so", "/lib/$x.so"} {
		if err := writeDepfile(path, "out/system.img", []string{bad}); err == nil {
			t.Errorf("writeDepfile(%q) succeeded, want an error", bad)
		}
	}
}

// TestPayloadDirs: the payload's directory and each directory below it
// that holds a file, once, so that make sees a program added to either.
func TestPayloadDirs(t *testing.T) {
	got := payloadDirs("out/kubernetes/bin", []string{
		"out/kubernetes/bin/hyperkube", "out/kubernetes/bin/worker/hyperkube",
		"out/kubernetes/bin/ptp", "out/kubernetes/bin/worker/kubelet",
	})
	want := []string{"out/kubernetes/bin", "out/kubernetes/bin/worker"}
	if !slices.Equal(got, want) {
		t.Errorf("payloadDirs = %q, want %q", got, want)
	}
}
