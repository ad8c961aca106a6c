package kexec

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/uki"
)

// TestMemfdFrom copies a span out of the middle of a file of several
// megabytes into a file in memory, as a reboot copies the kernel and the
// initramfs out of the ESP's image, and refuses a span that runs past the
// file's end.
func TestMemfdFrom(t *testing.T) {
	data := make([]byte, 5<<20)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	path := filepath.Join(t.TempDir(), "image")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	span := uki.Span{Offset: 4097, Size: int64(len(data)) - 4097 - 13}
	fd, err := memfdFrom("test", f, span)
	if err != nil {
		t.Fatalf("memfdFrom(%+v) = %v", span, err)
	}
	defer unix.Close(fd)
	got := make([]byte, span.Size+1)
	n, err := unix.Pread(fd, got, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := data[span.Offset : span.Offset+span.Size]; !bytes.Equal(got[:n], want) {
		t.Errorf("the memfd holds %d bytes, not the %d bytes of the span", n, len(want))
	}

	past := uki.Span{Offset: int64(len(data)) - 100, Size: 200}
	if fd, err := memfdFrom("test", f, past); err == nil || !strings.Contains(err.Error(), "100 bytes short") {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("memfdFrom(%+v) of a %d-byte file = %v, want an error saying it is 100 bytes short", past, len(data), err)
	}
}
