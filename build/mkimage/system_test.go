package main

import (
	"os"
	"path/filepath"
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
