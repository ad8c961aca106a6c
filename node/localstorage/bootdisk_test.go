package localstorage

import (
	"testing"
	"unicode/utf16"

	"github.com/google/uuid"
)

func efiVar(s string) []byte {
	b := []byte{0x06, 0, 0, 0} // boot service and runtime access
	for _, u := range utf16.Encode([]rune(s + "\x00")) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

func TestParseLoaderPartUUID(t *testing.T) {
	want := uuid.MustParse("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	for _, in := range []string{"0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"} {
		got, err := parseLoaderPartUUID(efiVar(in))
		if err != nil || got != want {
			t.Errorf("parseLoaderPartUUID(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range [][]byte{nil, {1, 2, 3}, efiVar("not a guid"), append(efiVar("x"), 0)} {
		if _, err := parseLoaderPartUUID(bad); err == nil {
			t.Errorf("parseLoaderPartUUID(%q) succeeded, want an error", bad)
		}
	}
}

func FuzzParseLoaderPartUUID(f *testing.F) {
	f.Add(efiVar("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseLoaderPartUUID(b)
	})
}
