package efivar

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// loadOption is an EFI_LOAD_OPTION worked out by hand (UEFI specification,
// section 3.1.3): attributes LOAD_OPTION_ACTIVE, FilePathListLength
// 42 + 18 + 4 = 64 (0x40), description "B" as UTF-16LE with its NUL, the
// device path of TestDevicePathMarshal, and two bytes of optional data.
var loadOption = slices.Concat(
	[]byte{0x01, 0x00, 0x00, 0x00},
	[]byte{0x40, 0x00},
	[]byte{'B', 0, 0, 0},
	hdNode, fileNode, endNode,
	[]byte{'x', 'y'},
)

func hdPath() DevicePath {
	return DevicePath{
		HardDrive{PartitionNumber: 1, PartitionStart: 0x800, PartitionSize: 0x80000,
			Signature: [16]byte(hdNode[24:40]), Format: FormatGPT, SignatureType: SignatureGUID},
		FilePath{Path: `\A.EFI`},
	}
}

func TestLoadOptionMarshal(t *testing.T) {
	o := &LoadOption{Attributes: LoadOptionActive, Description: "B", FilePath: hdPath(), OptionalData: []byte("xy")}
	got, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, loadOption) {
		t.Errorf("Marshal() =\n% x\nwant\n% x", got, loadOption)
	}
}

func TestLoadOptionRoundTrip(t *testing.T) {
	for _, o := range []*LoadOption{
		{Attributes: LoadOptionActive, Description: "B", FilePath: hdPath(), OptionalData: []byte("xy")},
		{Attributes: LoadOptionActive, Description: "Cairn system-b", FilePath: hdPath()},
		{Description: "", FilePath: DevicePath{}},
		{Attributes: 0x101, Description: "Ünïcode ✓ 𝄞", FilePath: hdPath(),
			MoreFilePaths: slices.Concat(fileNode, endNode), OptionalData: []byte{0, 1, 2}},
	} {
		back := roundTrip(t, o)
		if diff := cmp.Diff(o, back); diff != "" {
			t.Errorf("round trip of %q mismatch (-want +got):\n%s", o.Description, diff)
		}
	}
}

// roundTrip encodes o and decodes the result.
func roundTrip(t *testing.T, o *LoadOption) *LoadOption {
	t.Helper()
	b, err := o.Marshal()
	if err != nil {
		t.Fatalf("Marshal(%q): %v", o.Description, err)
	}
	back, err := ParseLoadOption(b)
	if err != nil {
		t.Fatalf("ParseLoadOption(Marshal(%q)): %v", o.Description, err)
	}
	return back
}

func TestLoadOptionErrors(t *testing.T) {
	if _, err := (&LoadOption{Description: "a\x00"}).Marshal(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Marshal(description with NUL) = %v, want ErrInvalid", err)
	}
	long := &LoadOption{FilePath: DevicePath{RawNode{Type: 1, SubType: 1, Data: make([]byte, 0xfff0)},
		RawNode{Type: 1, SubType: 1, Data: make([]byte, 0xfff0)}}}
	if _, err := long.Marshal(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Marshal(path longer than 64 KiB) = %v, want ErrInvalid", err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only", loadOption[:6]},
		{"description without NUL", loadOption[:8]},
		{"path length past the end", slices.Concat(loadOption[:4], []byte{0xff, 0x00}, loadOption[6:])},
		{"path longer than its length", slices.Concat(loadOption[:4], []byte{0x3c, 0x00}, loadOption[6:])},
		{"bad path", slices.Concat(loadOption[:4], []byte{0x04, 0x00}, loadOption[6:10], []byte{1, 2, 3, 4})},
	} {
		if _, err := ParseLoadOption(tc.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseLoadOption(%s) = %v, want ErrInvalid", tc.name, err)
		}
	}
}

// FuzzParseLoadOption checks that decoding never panics, and that what
// decodes encodes to an option that decodes the same.
func FuzzParseLoadOption(f *testing.F) {
	f.Add(loadOption)
	f.Add(slices.Concat([]byte{0, 0, 0, 0, 4, 0, 0, 0}, endNode))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseLoadOption(b)
		if err != nil {
			return
		}
		back := roundTrip(t, o)
		if o.Attributes != back.Attributes || o.Description != back.Description ||
			!o.FilePath.Equal(back.FilePath) || !bytes.Equal(o.MoreFilePaths, back.MoreFilePaths) ||
			!bytes.Equal(o.OptionalData, back.OptionalData) {
			t.Errorf("round trip of %+v gave %+v", o, back)
		}
	})
}
