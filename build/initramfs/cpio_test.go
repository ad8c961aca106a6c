package initramfs

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readNewc parses a newc archive back into entries, checking the fields
// Writer promises: magic, mtime 0, owner root, four-byte alignment and a
// trailer at the end. It is the test's independent reader.
func readNewc(b []byte) ([]Entry, error) {
	var entries []Entry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			return nil, errors.New("truncated header")
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			return nil, fmt.Errorf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				panic(err)
			}
			return uint32(v)
		}
		mode, uid, gid, mtime := field(1), field(2), field(3), field(5)
		size, major, minor, namesize := int(field(6)), field(9), field(10), int(field(11))
		if uid != 0 || gid != 0 || mtime != 0 {
			return nil, fmt.Errorf("entry at %d: uid %d gid %d mtime %d, want 0", off, uid, gid, mtime)
		}
		nameEnd := off + 110 + namesize
		if nameEnd > len(b) || b[nameEnd-1] != 0 {
			return nil, fmt.Errorf("entry at %d: bad name", off)
		}
		name := string(b[off+110 : nameEnd-1])
		dataStart := align(nameEnd)
		if dataStart+size > len(b) {
			return nil, fmt.Errorf("%q: truncated data", name)
		}
		if name == "TRAILER!!!" {
			if align(dataStart+size) != len(b) {
				return nil, fmt.Errorf("%d bytes after the trailer", len(b)-dataStart)
			}
			return entries, nil
		}
		e := Entry{Name: name, Mode: mode, Major: major, Minor: minor}
		if size > 0 {
			e.Data = b[dataStart : dataStart+size]
		}
		entries = append(entries, e)
		off = align(dataStart + size)
	}
}

var sample = []Entry{
	{Name: "dev", Mode: TypeDir | 0o755},
	{Name: "dev/console", Mode: TypeChar | 0o600, Major: 5, Minor: 1},
	{Name: "init", Mode: TypeRegular | 0o755, Data: []byte("\x7fELF binary")},
	{Name: "empty", Mode: TypeRegular | 0o644},
	{Name: "lib", Mode: TypeDir | 0o755},
	{Name: "lib/a", Mode: TypeRegular | 0o644, Data: []byte("abc")},   // 3 bytes: padded
	{Name: "lib/bcde", Mode: TypeRegular | 0o644, Data: []byte("ab")}, // name pads to 4
	{Name: "sbin", Mode: TypeSymlink | 0o777, Data: []byte("lib")},
	{Name: "tmp", Mode: TypeDir | 0o1777},
}

func writeSample(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, e := range sample {
		if err := w.Add(e); err != nil {
			t.Fatalf("Add(%q): %v", e.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return buf.Bytes()
}

func TestWriterRoundTrip(t *testing.T) {
	got, err := readNewc(writeSample(t))
	if err != nil {
		t.Fatalf("reading the archive back: %v", err)
	}
	if diff := cmp.Diff(sample, got); diff != "" {
		t.Errorf("entries read back (-want +got):\n%s", diff)
	}
}

// TestWriterWithDebianCpio lists the archive with GNU cpio, the reference
// reader of the format.
func TestWriterWithDebianCpio(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("GNU cpio is not installed (build/deps.sh installs it): cannot cross-check the archive")
	}
	cmd := exec.Command("cpio", "-itv", "--quiet")
	cmd.Stdin = bytes.NewReader(writeSample(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -itv: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(sample) {
		t.Fatalf("cpio -itv listed %d entries, want %d:\n%s", len(lines), len(sample), out)
	}
	want := []struct{ perm, name string }{
		{"drwxr-xr-x", "dev"},
		{"crw-------", "dev/console"},
		{"-rwxr-xr-x", "init"},
		{"-rw-r--r--", "empty"},
		{"drwxr-xr-x", "lib"},
		{"-rw-r--r--", "lib/a"},
		{"-rw-r--r--", "lib/bcde"},
		{"lrwxrwxrwx", "sbin -> lib"},
		{"drwxrwxrwt", "tmp"},
	}
	for i, line := range lines {
		if !strings.HasPrefix(line, want[i].perm) || !strings.HasSuffix(line, " "+want[i].name) {
			t.Errorf("cpio -itv line %d = %q, want %s ... %s", i, line, want[i].perm, want[i].name)
		}
	}
	if !strings.Contains(lines[1], "5,") || !strings.Contains(lines[1], " 1 ") {
		t.Errorf("cpio -itv shows dev/console as %q, want device 5, 1", lines[1])
	}
}

func TestWriterRejects(t *testing.T) {
	for _, e := range []Entry{
		{Name: "", Mode: TypeRegular},
		{Name: "/init", Mode: TypeRegular},
		{Name: "a/../b", Mode: TypeRegular},
		{Name: "../etc", Mode: TypeDir},
		{Name: "a//b", Mode: TypeRegular},
		{Name: "dir", Mode: TypeDir | 0o755, Data: []byte("x")},
		{Name: "fifo", Mode: 0o010644},
	} {
		w := NewWriter(&bytes.Buffer{})
		if err := w.Add(e); err == nil {
			t.Errorf("Add(%q, %#o) succeeded, want an error", e.Name, e.Mode)
		}
	}
	w := NewWriter(&bytes.Buffer{})
	w.Close()
	if err := w.Add(Entry{Name: "late", Mode: TypeRegular}); err == nil {
		t.Error("Add after Close succeeded, want an error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterPassesErrors(t *testing.T) {
	w := NewWriter(failingWriter{})
	if err := w.Add(sample[0]); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Add on a failing writer = %v, want the write error", err)
	}
}
