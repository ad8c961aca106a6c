//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/build/initramfs"
	"cairn.dev/cairn/test/launch"
)

// TestPackagesInNode runs the unit tests of the packages that need what
// only a node has, such as pkg/fsquota's project quotas on the data
// partition's XFS, which the test machine's kernel may lack: make e2e
// builds their test binaries into out/nodetests, and this suite boots the
// test image with them in its initramfs and cairn.test.run, on a fresh
// data partition (cairn.test.storage-keys). Every binary must pass, and
// none of their tests may skip.
func TestPackagesInNode(t *testing.T) {
	s := newSuite(t, 1, 15*time.Minute)
	dir := artifact(t, "nodetests")
	bins, err := filepath.Glob(filepath.Join(dir, "*.test"))
	if err != nil || len(bins) == 0 {
		t.Fatalf("no test binaries in %s (make e2e builds them): %v", dir, err)
	}
	initrd := withFiles(t, artifact(t, "initramfs-test.img"), "nodetests", bins)
	flags := "cairn.test.storage-keys=" + randomHex(t, 64) + ":" + randomHex(t, 64) + " cairn.test.run=/nodetests"
	n := s.bootDiskInitrd("node", copyImage(t), initrd, flags)
	s.dataMounted(n, "new", "/init → data partition mounted (new, with mkfs)")
	mounted := n.Console().Lines()
	start := time.Now()
	done := s.waitFrom(n, len(mounted)-1, launch.Substring("cairn: node tests finished: "))
	s.step("the tests of "+strings.Join(names(bins), ", "), time.Since(start))

	var out strings.Builder
	skipped := regexp.MustCompile(`node test \S+: \s*--- SKIP: `)
	for _, l := range n.Console().Lines()[len(mounted)-1 : done.Index+1] {
		if i := strings.Index(l.Text, "node test "); i >= 0 {
			out.WriteString(l.Text[i:] + "\n")
			if skipped.MatchString(l.Text) {
				t.Errorf("a test skipped inside the node: %s", l.Text[i:])
			}
		}
	}
	t.Logf("the tests' output:\n%s", out.String())
	if want := "passed; failed: []"; !strings.HasSuffix(done.Text, want) || strings.Contains(done.Text, " 0 of ") {
		t.Errorf("%s, want every binary to pass", done.Text[strings.Index(done.Text, "node tests"):])
	}
	s.powerOff(n)
}

// withFiles returns a copy of the initramfs base (compressed or not) with
// the files appended under dir, as a second, uncompressed cpio archive:
// the kernel unpacks both.
func withFiles(t *testing.T, base, dir string, files []string) string {
	t.Helper()
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel takes a cpio archive that follows a compressed one only
	// at an offset that is a multiple of 4, skipping the zeros before it.
	if pad := len(b) % 4; pad != 0 {
		b = append(b, make([]byte, 4-pad)...)
	}
	buf := bytes.NewBuffer(b)
	w := initramfs.NewWriter(buf)
	if err := w.Add(initramfs.Entry{Name: dir, Mode: initramfs.TypeDir | 0o755}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(initramfs.Entry{Name: dir + "/" + filepath.Base(f), Mode: initramfs.TypeRegular | 0o755, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "initramfs-nodetests.img")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// names returns the base names of paths.
func names(paths []string) []string {
	var ns []string
	for _, p := range paths {
		ns = append(ns, filepath.Base(p))
	}
	return ns
}
