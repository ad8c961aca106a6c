package uki

import (
	"bytes"
	"strings"
	"testing"
)

// The round trip, Locate finding again what build/uki's Build wrote, is
// tested there (TestLocate), next to the writer.

// FuzzLocate checks that whatever the ESP's file holds, Locate returns an
// error or a command line as promised, without panicking.
func FuzzLocate(f *testing.F) {
	f.Add([]byte("not a PE file"))
	f.Add([]byte("MZ"))
	f.Fuzz(func(t *testing.T, img []byte) {
		b, err := Locate(bytes.NewReader(img))
		if err != nil {
			return
		}
		if strings.TrimRight(b.Cmdline, "\x00 \n") != b.Cmdline {
			t.Errorf("Locate(%d bytes) = command line %q, want it trimmed", len(img), b.Cmdline)
		}
	})
}

// FuzzPCR11 checks that whatever the file holds, PCR11 returns a value or
// an error, without panicking.
func FuzzPCR11(f *testing.F) {
	f.Add([]byte("not a PE file"))
	f.Add([]byte("MZ"))
	f.Fuzz(func(t *testing.T, img []byte) {
		_, _ = PCR11(bytes.NewReader(img))
	})
}
