package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/ociimage"
)

// TestUsers: the user database has root and nobody, and each user added
// with a group of its own that also belongs to group-defined-in-image,
// as agnhost's Dockerfile makes them.
func TestUsers(t *testing.T) {
	files := users("u:x:1000:1000::/home/u:/bin/sh\n")
	if len(files) != 2 || files[0].Path != "/etc/passwd" || files[1].Path != "/etc/group" {
		t.Fatalf("users = %+v, want /etc/passwd and /etc/group", files)
	}
	if got := string(files[0].Data); !strings.HasPrefix(got, "root:x:0:0:") || !strings.Contains(got, "\nu:x:1000:1000:") {
		t.Errorf("passwd = %q, want root first, then u", got)
	}
	if got, want := string(files[1].Data), "root:x:0:\nnobody:x:65534:\nu:x:1000:\ngroup-defined-in-image:x:50000:u\n"; got != want {
		t.Errorf("group = %q, want %q", got, want)
	}
	if got := string(users("")[1].Data); strings.Contains(got, "group-defined-in-image") {
		t.Errorf("group without users added = %q, want no group-defined-in-image", got)
	}
}

// TestBusyboxImage builds the busybox image from the build machine's
// programs: applets are links to busybox, at Debian's paths and in /bin,
// but those its tools replace (sh to envsh, nc to netcat 1.10, wget GNU's
// own file), /tmp is sticky, and it runs sh with a PATH.
func TestBusyboxImage(t *testing.T) {
	for _, p := range append([]string{"/bin/busybox"}, toolPaths(busyboxTools)...) {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs the programs build/deps.sh conformance installs: %v", err)
		}
	}
	img, err := (&builder{}).busybox()
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct{ Entrypoint, Cmd, Env []string }
	}
	if err := json.Unmarshal(img.Config.Data, &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.Entrypoint != nil || !slices.Equal(config.Config.Cmd, []string{"sh"}) || !slices.Equal(config.Config.Env, []string{pathEnv}) {
		t.Errorf("config = %+v, want sh with the PATH", config.Config)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(img.Layer.Data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
	}
	links := map[string]string{
		"bin/sh": envshPath, "bin/ls": "/bin/busybox", "usr/bin/nc": "/bin/nc.traditional",
		// Every applet is in /bin too, as in upstream's image.
		"sbin/sysctl": "/bin/busybox", "bin/sysctl": "/bin/busybox", "bin/wget": "/usr/bin/wget",
	}
	for name, to := range links {
		if h := entries[name]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != to {
			t.Errorf("%s = %+v, want a link to %s", name, h, to)
		}
	}
	for _, name := range []string{"bin/busybox", "usr/bin/bash", "usr/bin/wget", "bin/nc.traditional", "usr/bin/envsh"} {
		if h := entries[name]; h == nil || h.Typeflag != tar.TypeReg {
			t.Errorf("%s = %+v, want a file", name, h)
		}
	}
	if h := entries["tmp/"]; h == nil || fs.FileMode(h.Mode)&0o1777 != 0o1777 {
		t.Errorf("tmp/ = %+v, want a sticky directory open to all", h)
	}
	if h := entries["etc/passwd"]; h == nil {
		t.Error("no etc/passwd")
	}
}

// toolPaths are the build machine's paths of tools, but those built here.
func toolPaths(tools []tool) []string {
	var paths []string
	for _, t := range tools {
		if t.pkg == "" {
			paths = append(paths, t.path)
		}
	}
	return paths
}

// TestUnion: a path already there is not added again, and the rest keep
// their order.
func TestUnion(t *testing.T) {
	got := union(
		[]ociimage.File{{Path: "/bin/busybox"}, {Path: "/lib/libc.so.6", Data: []byte("a")}},
		[]ociimage.File{{Path: "/lib/libc.so.6", Data: []byte("b")}, {Path: "/usr/sbin/nginx"}},
	)
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path+"="+string(f.Data))
	}
	if want := []string{"/bin/busybox=", "/lib/libc.so.6=a", "/usr/sbin/nginx="}; !slices.Equal(paths, want) {
		t.Errorf("union = %q, want %q", paths, want)
	}
}
