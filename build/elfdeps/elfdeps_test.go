package elfdeps

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// lddLibraries runs ldd on bin and returns the paths it prints for the
// interpreter and each library, sorted; the vDSO has no file and is left
// out.
func lddLibraries(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	var paths []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 3 && fields[1] == "=>":
			paths = append(paths, fields[2])
		case len(fields) == 2 && strings.HasPrefix(fields[0], "/"):
			paths = append(paths, fields[0])
		}
	}
	slices.Sort(paths)
	return paths
}

// needBinary skips when a system binary the test reads is absent.
func needBinary(t *testing.T, bin string) {
	t.Helper()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not installed on this machine (build/deps.sh installs it): %v", bin, err)
	}
}

func TestResolveMatchesLdd(t *testing.T) {
	for _, bin := range []string{"/usr/sbin/mkfs.xfs", "/bin/ls"} {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			needBinary(t, bin)
			c, err := Resolve([]string{bin})
			if err != nil {
				t.Fatalf("Resolve(%q): %v", bin, err)
			}
			if diff := cmp.Diff(lddLibraries(t, bin), c.Libraries); diff != "" {
				t.Errorf("Resolve(%q).Libraries differs from ldd (-ldd +got):\n%s", bin, diff)
			}
			checkClosed(t, c, append([]string{bin}, c.Libraries...))
		})
	}
}

// checkClosed checks that every path in want is in c.Files, and that every
// symlink of c.Files leads to another entry of c.Files, the way it will
// resolve inside the image.
func checkClosed(t *testing.T, c *Closure, want []string) {
	t.Helper()
	byPath := map[string]File{}
	for _, f := range c.Files {
		byPath[f.Path] = f
	}
	for _, p := range want {
		if _, ok := byPath[p]; !ok {
			t.Errorf("Files has no %s", p)
		}
	}
	for _, f := range c.Files {
		if f.Link == "" {
			if f.Mode&0o444 == 0 {
				t.Errorf("%s: mode %v is not readable", f.Path, f.Mode)
			}
			continue
		}
		target := f.Link
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(f.Path), target)
		}
		if _, ok := byPath[target]; !ok {
			t.Errorf("symlink %s -> %s: target %s is not in Files", f.Path, f.Link, target)
		}
	}
}

func TestResolveCarriesTwoBinariesOnce(t *testing.T) {
	bins := []string{"/usr/sbin/mkfs.xfs", "/bin/ls"}
	for _, bin := range bins {
		needBinary(t, bin)
	}
	c, err := Resolve(bins)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", bins, err)
	}
	var want []string
	for _, bin := range bins {
		want = append(want, lddLibraries(t, bin)...)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if diff := cmp.Diff(want, c.Libraries); diff != "" {
		t.Errorf("Resolve(%q).Libraries (-ldd +got):\n%s", bins, diff)
	}
	seen := map[string]bool{}
	for _, f := range c.Files {
		if seen[f.Path] {
			t.Errorf("Files holds %s twice", f.Path)
		}
		seen[f.Path] = true
	}
	checkClosed(t, c, append(bins, c.Libraries...))
}

// linkLibraries makes dir a library directory holding symlinks to the
// libraries /bin/ls needs, except the ones named in leave.
func linkLibraries(t *testing.T, dir string, leave ...string) {
	t.Helper()
	for _, lib := range lddLibraries(t, "/bin/ls") {
		name := filepath.Base(lib)
		if slices.Contains(leave, name) {
			continue
		}
		if err := os.Symlink(lib, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestResolveMissingLibrary(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leave   string
		needer  func(dir string) string
		missing string
	}{
		{"needed by the binary", "libselinux.so.1",
			func(string) string { return "/bin/ls" }, "libselinux.so.1"},
		{"needed by a library", "libpcre2-8.so.0",
			func(dir string) string { return filepath.Join(dir, "libselinux.so.1") }, "libpcre2-8.so.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			linkLibraries(t, dir, tc.leave)
			_, err := Resolve([]string{"/bin/ls"}, WithSearchDirs(dir))
			if err == nil {
				t.Fatalf("Resolve without %s succeeded, want an error", tc.leave)
			}
			for _, want := range []string{tc.needer(dir), tc.missing} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Resolve without %s: error %q does not name %q", tc.leave, err, want)
				}
			}
		})
	}
}

func TestResolveBadELF(t *testing.T) {
	ls, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{
		"empty":   nil,
		"garbage": []byte("#!/bin/sh\necho this is not an ELF file\n"),
		"magic":   []byte("\x7fELF\x02\x01\x01\x00garbage after a valid magic"),
	}
	for _, n := range []int{16, 63, 64, 200, 1000, 4096, len(ls) / 2, len(ls) - 1} {
		inputs[fmt.Sprintf("ls truncated to %d", n)] = ls[:n]
	}
	dir := t.TempDir()
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.WriteFile(p, data, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := Resolve([]string{p}); err == nil {
				t.Errorf("Resolve(%s, %d bytes) succeeded, want an error", name, len(data))
			}
		})
	}
}

func TestResolveFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	// ls-abs -> ls-rel -> /bin/ls: a relative link to an absolute one.
	mustSymlink(t, "/bin/ls", filepath.Join(dir, "ls-rel"))
	mustSymlink(t, "ls-rel", filepath.Join(dir, "ls-abs"))
	c, err := Resolve([]string{filepath.Join(dir, "ls-abs")})
	if err != nil {
		t.Fatalf("Resolve(ls-abs): %v", err)
	}
	got := map[string]string{}
	for _, f := range c.Files {
		got[f.Path] = f.Link
	}
	want := map[string]string{
		filepath.Join(dir, "ls-abs"): "ls-rel",
		filepath.Join(dir, "ls-rel"): "/bin/ls",
		"/bin/ls":                    "",
	}
	for p, link := range want {
		if l, ok := got[p]; !ok || l != link {
			t.Errorf("Files[%s] = %q (present %v), want link %q", p, l, ok, link)
		}
	}
	checkClosed(t, c, nil)
}

func TestResolveSymlinkErrors(t *testing.T) {
	dir := t.TempDir()
	mustSymlink(t, "nowhere", filepath.Join(dir, "dangling"))
	mustSymlink(t, "loop-b", filepath.Join(dir, "loop-a"))
	mustSymlink(t, "loop-a", filepath.Join(dir, "loop-b"))
	// alias -> real/deep, and real/deep/ls -> ../ls: on the host that is
	// real/ls, but inside the image, where alias is a plain directory, it
	// would be dir/ls.
	if err := os.MkdirAll(filepath.Join(dir, "real/deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "/bin/ls", filepath.Join(dir, "real/ls"))
	mustSymlink(t, "../ls", filepath.Join(dir, "real/deep/ls"))
	mustSymlink(t, "real/deep", filepath.Join(dir, "alias"))
	if err := os.WriteFile(filepath.Join(dir, "ls"), []byte("another file"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ bin, want string }{
		{"dangling", "dangling"},
		{"loop-a", "loop-a"},
		{"alias/ls", "resolves elsewhere"},
		{"missing", "missing"},
	} {
		p := filepath.Join(dir, tc.bin)
		_, err := Resolve([]string{p})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%s) = %v, want an error with %q", tc.bin, err, tc.want)
		}
	}
	if _, err := Resolve([]string{"bin/ls"}); err == nil {
		t.Errorf("Resolve(%q) succeeded, want an error for a relative path", "bin/ls")
	}
}

func mustSymlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

func TestExpandOrigin(t *testing.T) {
	for _, tc := range []struct {
		dir, want string
		err       bool
	}{
		{"$ORIGIN/../lib", "/opt/x/bin/../lib", false},
		{"${ORIGIN}/lib", "/opt/x/bin/lib", false},
		{"/usr/lib/private", "/usr/lib/private", false},
		{"", "", false},
		{"$LIB/x", "", true},
		{"relative/dir", "", true},
	} {
		got, err := expandOrigin(tc.dir, "/opt/x/bin")
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("expandOrigin(%q) = %q, %v; want %q, error %v", tc.dir, got, err, tc.want, tc.err)
		}
	}
}
