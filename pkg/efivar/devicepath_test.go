package efivar

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"cairn.dev/cairn/pkg/gpt"
)

var partGUID = uuid.MustParse("01234567-89ab-cdef-0123-456789abcdef")

// Encodings worked out by hand from the UEFI specification, section 10.3.
var (
	// hdNode is the Hard Drive node of partition 1 at LBA 0x800, 0x80000
	// LBAs long, with partGUID as its GPT signature: type 4, subtype 1,
	// length 42 (0x2a): header 4 + number 4 + start 8 + size 8 +
	// signature 16 + format 1 + signature type 1.
	hdNode = []byte{
		0x04, 0x01, 0x2a, 0x00,
		0x01, 0x00, 0x00, 0x00, // partition number 1
		0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // start 0x800
		0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, // size 0x80000
		// The GUID's first three fields little-endian, the rest as is.
		0x67, 0x45, 0x23, 0x01, 0xab, 0x89, 0xef, 0xcd,
		0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
		0x02, // GPT
		0x02, // GUID signature
	}
	// fileNode is the File Path node of \A.EFI: type 4, subtype 4, six
	// UTF-16LE characters and a NUL (14 bytes) after the 4-byte header,
	// 18 (0x12) in all.
	fileNode = []byte{
		0x04, 0x04, 0x12, 0x00,
		'\\', 0, 'A', 0, '.', 0, 'E', 0, 'F', 0, 'I', 0, 0, 0,
	}
	// endNode is End of Entire Device Path: type 0x7f, subtype 0xff,
	// length 4.
	endNode = []byte{0x7f, 0xff, 0x04, 0x00}
)

// espTable is a GPT whose entry 1 (partition 2) is the ESP above; entry 0
// is another partition, and entry 2 is unused.
func espTable() *gpt.Table {
	return &gpt.Table{
		SectorSize: 512,
		Entries: []gpt.Partition{
			{Type: uuid.MustParse("0fc63daf-8483-4772-8e79-3d69d8477de4"), ID: uuid.New(), FirstLBA: 34, LastLBA: 0x7ff},
			{Type: gpt.TypeEFISystem, ID: partGUID, FirstLBA: 0x800, LastLBA: 0x807ff},
			{},
		},
	}
}

func TestHardDriveFor(t *testing.T) {
	hd, err := HardDriveFor(espTable(), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := HardDrive{
		PartitionNumber: 2,
		PartitionStart:  0x800,
		PartitionSize:   0x80000,
		Signature:       [16]byte(hdNode[24:40]),
		Format:          FormatGPT,
		SignatureType:   SignatureGUID,
	}
	if diff := cmp.Diff(want, hd); diff != "" {
		t.Errorf("HardDriveFor(entry 1) mismatch (-want +got):\n%s", diff)
	}
	if got := hd.PartitionGUID(); got != partGUID {
		t.Errorf("PartitionGUID() = %v, want %v", got, partGUID)
	}
	for _, i := range []int{-1, 2, 3} {
		if _, err := HardDriveFor(espTable(), i); err == nil {
			t.Errorf("HardDriveFor(entry %d) succeeded, want an error", i)
		}
	}
}

func TestDevicePathMarshal(t *testing.T) {
	hd := HardDrive{PartitionNumber: 1, PartitionStart: 0x800, PartitionSize: 0x80000,
		Signature: [16]byte(hdNode[24:40]), Format: FormatGPT, SignatureType: SignatureGUID}
	got, err := DevicePath{hd, FilePath{Path: `\A.EFI`}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(hdNode, fileNode, endNode)
	if !bytes.Equal(got, want) {
		t.Errorf("Marshal() =\n% x\nwant\n% x", got, want)
	}
	if len(hdNode) != 42 {
		t.Fatalf("the hand-made HD node is %d bytes, want 42", len(hdNode))
	}
	p, rest, err := ParseDevicePath(append(want, 0xaa))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DevicePath{hd, FilePath{Path: `\A.EFI`}}, p); diff != "" {
		t.Errorf("ParseDevicePath mismatch (-want +got):\n%s", diff)
	}
	if !bytes.Equal(rest, []byte{0xaa}) {
		t.Errorf("ParseDevicePath left % x, want aa", rest)
	}
}

func TestESPFile(t *testing.T) {
	for _, file := range []string{"EFI/cairn/system-b.efi", `\EFI\cairn\system-b.efi`, "/EFI/cairn/system-b.efi"} {
		p, err := ESPFile(espTable(), 1, file)
		if err != nil {
			t.Fatalf("ESPFile(%q): %v", file, err)
		}
		want := `HD(2,GPT,01234567-89ab-cdef-0123-456789abcdef,0x800,0x80000)/\EFI\cairn\system-b.efi`
		if got := p.String(); got != want {
			t.Errorf("ESPFile(%q) = %q, want %q", file, got, want)
		}
	}
	if _, err := ESPFile(espTable(), 2, "EFI/x.efi"); err == nil {
		t.Error("ESPFile(unused entry) succeeded, want an error")
	}
}

func TestDevicePathString(t *testing.T) {
	var mbrSig [16]byte
	copy(mbrSig[:], []byte{0x78, 0x56, 0x34, 0x12})
	for _, tc := range []struct {
		p    DevicePath
		want string
	}{
		{DevicePath{}, ""},
		{DevicePath{HardDrive{PartitionNumber: 3, PartitionStart: 1, PartitionSize: 2, Signature: mbrSig,
			Format: FormatMBR, SignatureType: SignatureMBR}}, "HD(3,MBR,0x12345678,0x1,0x2)"},
		{DevicePath{HardDrive{PartitionNumber: 1, Format: 7, SignatureType: 0}},
			"HD(1,7,0,00000000000000000000000000000000,0x0,0x0)"},
		{DevicePath{RawNode{Type: 1, SubType: 1, Data: []byte{0x00, 0x1f}}, FilePath{Path: `\x`}},
			`Path(1,1,001F)/\x`},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestDevicePathEqual(t *testing.T) {
	a, _ := ESPFile(espTable(), 1, "EFI/cairn/system-a.efi")
	a2, _ := ESPFile(espTable(), 1, `\EFI\cairn\system-a.efi`)
	b, _ := ESPFile(espTable(), 1, "EFI/cairn/system-b.efi")
	if !a.Equal(a2) {
		t.Errorf("%s does not equal itself", a)
	}
	if a.Equal(b) {
		t.Errorf("%s equals %s", a, b)
	}
}

func TestDevicePathMarshalErrors(t *testing.T) {
	for _, p := range []DevicePath{
		{RawNode{Type: 0x7f, SubType: 0xff}},
		{RawNode{Type: 1, SubType: 1, Data: make([]byte, 0x10000)}},
		{FilePath{Path: "a\x00b"}},
	} {
		if _, err := p.Marshal(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Marshal(%s) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestParseDevicePathErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"no end node", slices.Clone(fileNode)},
		{"short header", []byte{0x7f, 0xff, 0x04}},
		{"length below header", []byte{0x04, 0x04, 0x03, 0x00, 0x7f, 0xff, 0x04, 0x00}},
		{"length past the end", []byte{0x04, 0x04, 0x40, 0x00, 0x7f, 0xff, 0x04, 0x00}},
		{"end node with data", []byte{0x7f, 0xff, 0x05, 0x00, 0x00}},
		{"HD node too short", slices.Concat([]byte{0x04, 0x01, 0x29, 0x00}, hdNode[4:41], endNode)},
		{"file path of odd length", []byte{0x04, 0x04, 0x07, 0x00, 'a', 0, 0, 0x7f, 0xff, 0x04, 0x00}},
		{"file path without NUL", []byte{0x04, 0x04, 0x06, 0x00, 'a', 0, 0x7f, 0xff, 0x04, 0x00}},
		{"file path with bytes after NUL", []byte{0x04, 0x04, 0x08, 0x00, 0, 0, 'a', 0, 0x7f, 0xff, 0x04, 0x00}},
	} {
		if _, _, err := ParseDevicePath(tc.b); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseDevicePath(%s: % x) = %v, want ErrInvalid", tc.name, tc.b, err)
		}
	}
}

// FuzzParseDevicePath checks that decoding never panics, and that what
// decodes encodes to bytes that decode to the same path.
func FuzzParseDevicePath(f *testing.F) {
	f.Add(slices.Concat(hdNode, fileNode, endNode))
	f.Add(slices.Concat([]byte{0x01, 0x01, 0x06, 0x00, 0x00, 0x1f}, endNode))
	f.Add(endNode)
	f.Fuzz(func(t *testing.T, b []byte) {
		p, _, err := ParseDevicePath(b)
		if err != nil {
			return
		}
		_ = p.String()
		again, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal(%s) of a parsed path: %v", p, err)
		}
		q, rest, err := ParseDevicePath(again)
		if err != nil {
			t.Fatalf("ParseDevicePath(Marshal(%s)): %v", p, err)
		}
		if len(rest) != 0 || !p.Equal(q) {
			t.Errorf("round trip of %s gave %s and % x left", p, q, rest)
		}
	})
}
