package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"

	ukiread "cairn.dev/cairn/pkg/uki"
)

// tinyStub returns a minimal PE32+ EFI application with one .text section,
// laid out the way linkers do: headers in the first 0x400 bytes, sections
// aligned to secAlign in memory and 0x200 in the file.
func tinyStub(secAlign uint32) []byte {
	b := make([]byte, 0x600)
	le := binary.LittleEndian
	copy(b, "MZ")
	le.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	coff := b[0x44:]
	le.PutUint16(coff[0:], 0x8664) // machine: x86-64
	le.PutUint16(coff[2:], 1)      // sections
	le.PutUint16(coff[16:], 240)   // optional header size
	le.PutUint16(coff[18:], 0x206) // executable, stripped
	opt := b[0x58:]
	le.PutUint16(opt[0:], 0x20b) // PE32+
	le.PutUint32(opt[16:], secAlign)
	le.PutUint32(opt[32:], secAlign)
	le.PutUint32(opt[36:], 0x200)
	le.PutUint32(opt[56:], 2*secAlign) // SizeOfImage
	le.PutUint32(opt[60:], 0x400)      // SizeOfHeaders
	le.PutUint16(opt[68:], 10)         // EFI application
	le.PutUint32(opt[108:], 16)        // data directories
	text := b[0x58+240:]
	copy(text, ".text")
	le.PutUint32(text[8:], 0x180)       // VirtualSize
	le.PutUint32(text[12:], secAlign)   // VirtualAddress
	le.PutUint32(text[16:], 0x200)      // SizeOfRawData
	le.PutUint32(text[20:], 0x400)      // PointerToRawData
	le.PutUint32(text[36:], 0x60000020) // code, execute, read
	copy(b[0x400:], bytes.Repeat([]byte{0xc3}, 0x180))
	return b
}

// checkImage parses img and verifies the appended sections: content,
// order, alignment, no overlap in memory, and the header totals.
func checkImage(t *testing.T, img []byte, stubSections int, want []Section) {
	t.Helper()
	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("parsing the unified image: %v", err)
	}
	defer f.Close()
	opt := f.OptionalHeader.(*pe.OptionalHeader64)
	if got := len(f.Sections); got != stubSections+len(want) {
		t.Fatalf("image has %d sections, want %d", got, stubSections+len(want))
	}
	var end uint32
	for i, s := range f.Sections {
		if s.VirtualAddress < end {
			t.Errorf("section %s at %#x overlaps the previous one ending at %#x", s.Name, s.VirtualAddress, end)
		}
		// In memory a section spans VirtualSize; a zero one means its raw
		// size.
		size := s.VirtualSize
		if size == 0 {
			size = s.Size
		}
		end = s.VirtualAddress + size
		if i < stubSections {
			continue
		}
		w := want[i-stubSections]
		if s.Name != w.Name {
			t.Errorf("section %d is %q, want %q", i, s.Name, w.Name)
		}
		data, err := s.Data()
		if err != nil {
			t.Fatalf("reading section %s: %v", s.Name, err)
		}
		if !bytes.Equal(data[:s.VirtualSize], w.Data) || int(s.VirtualSize) != len(w.Data) {
			t.Errorf("section %s holds %d bytes, not the %d given", s.Name, s.VirtualSize, len(w.Data))
		}
		if s.VirtualAddress%pageSize != 0 || s.VirtualAddress%opt.SectionAlignment != 0 {
			t.Errorf("section %s at %#x is not page and section aligned", s.Name, s.VirtualAddress)
		}
		if s.Offset%opt.FileAlignment != 0 {
			t.Errorf("section %s at file offset %#x is not file aligned", s.Name, s.Offset)
		}
		if s.Characteristics != readOnlyData {
			t.Errorf("section %s characteristics %#x, want %#x", s.Name, s.Characteristics, readOnlyData)
		}
	}
	if opt.SizeOfImage < end || opt.SizeOfImage%opt.SectionAlignment != 0 {
		t.Errorf("SizeOfImage %#x does not cover the sections ending at %#x", opt.SizeOfImage, end)
	}
	checkOff := int(binary.LittleEndian.Uint32(img[0x3c:])) + 24 + 64
	if got, want := opt.CheckSum, checksum(img, checkOff); got != want {
		t.Errorf("CheckSum %#x, want %#x", got, want)
	}
}

func sampleSections() []Section {
	return Sections(OSRelease("v0-test", "6.1.0-99-amd64"), []byte("console=ttyS0"),
		[]byte("6.1.0-99-amd64"), bytes.Repeat([]byte("initrd"), 1000), bytes.Repeat([]byte("kernel"), 3000))
}

func TestBuildTinyStub(t *testing.T) {
	for _, align := range []uint32{0x200, 0x1000, 0x10000} {
		stub := tinyStub(align)
		img, err := Build(stub, sampleSections())
		if err != nil {
			t.Fatalf("Build(stub aligned %#x): %v", align, err)
		}
		checkImage(t, img, 1, sampleSections())
		if !bytes.Equal(img[0x400:0x600], stub[0x400:0x600]) {
			t.Errorf("stub aligned %#x: the stub's own section changed", align)
		}
		again, _ := Build(stub, sampleSections())
		if !bytes.Equal(img, again) {
			t.Errorf("stub aligned %#x: two builds differ", align)
		}
	}
}

// TestBuildSystemdStub builds with the stub the image build uses.
func TestBuildSystemdStub(t *testing.T) {
	const path = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	stub, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		t.Skip("systemd-boot-efi is not installed (build/deps.sh installs it): no stub to test with")
	}
	if err != nil {
		t.Fatal(err)
	}
	// The checksum routine must agree with the linker that wrote the stub.
	checkOff := int(binary.LittleEndian.Uint32(stub[0x3c:])) + 24 + 64
	if got, want := checksum(stub, checkOff), binary.LittleEndian.Uint32(stub[checkOff:]); want != 0 && got != want {
		t.Errorf("checksum(stub) = %#x, stub says %#x", got, want)
	}
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		t.Fatal(err)
	}
	n := len(f.Sections)
	f.Close()
	img, err := Build(stub, sampleSections())
	if err != nil {
		t.Fatalf("Build(systemd stub): %v", err)
	}
	checkImage(t, img, n, sampleSections())
}

func TestBuildRejects(t *testing.T) {
	stub := tinyStub(0x1000)
	for name, tc := range map[string]struct {
		stub     []byte
		sections []Section
	}{
		"not a PE":       {[]byte("not an executable at all, just text"), sampleSections()},
		"long name":      {stub, []Section{{".toolongname", nil}}},
		"empty name":     {stub, []Section{{"", []byte("x")}}},
		"no header room": {stub, make([]Section, 20)},
		"signed stub":    {signed(stub), sampleSections()},
		"truncated stub": {stub[:0x100], sampleSections()},
	} {
		if _, err := Build(tc.stub, tc.sections); err == nil {
			t.Errorf("Build(%s) succeeded, want an error", name)
		}
	}
}

func signed(stub []byte) []byte {
	b := bytes.Clone(stub)
	dir := 0x58 + 112 + 8*securityDirectory
	binary.LittleEndian.PutUint32(b[dir:], 0x600)
	binary.LittleEndian.PutUint32(b[dir+4:], 0x10)
	return b
}

func TestOSRelease(t *testing.T) {
	got := string(OSRelease("v1.2-3-gabc", "6.1.0-56-amd64"))
	for _, want := range []string{"ID=cairn\n", `VERSION_ID="v1.2-3-gabc"`, `PRETTY_NAME="Cairn v1.2-3-gabc (kernel 6.1.0-56-amd64)"`} {
		if !strings.Contains(got, want) {
			t.Errorf("OSRelease() = %q, want it to contain %q", got, want)
		}
	}
}

// TestBuildDropsSymbolTable covers stubs that keep a COFF symbol table
// after their sections, as systemd's does: the table goes, the sections
// take its place.
func TestBuildDropsSymbolTable(t *testing.T) {
	stub := tinyStub(0x1000)
	binary.LittleEndian.PutUint32(stub[0x44+8:], uint32(len(stub)))
	binary.LittleEndian.PutUint32(stub[0x44+12:], 1)
	stub = append(stub, make([]byte, 18)...) // one symbol
	stub = append(stub, 4, 0, 0, 0)          // empty string table
	img, err := Build(stub, sampleSections())
	if err != nil {
		t.Fatalf("Build(stub with symbols): %v", err)
	}
	checkImage(t, img, 1, sampleSections())
	if got := binary.LittleEndian.Uint32(img[0x44+8:]); got != 0 {
		t.Errorf("PointerToSymbolTable = %#x, want 0", got)
	}
}

// TestLocate checks that pkg/uki's Locate, with which a node reads its
// image for kexec, finds again what Build wrote, and refuses an image
// without a kernel or cut short in its command line.
func TestLocate(t *testing.T) {
	s := sampleSections()
	img, err := Build(tinyStub(0x1000), s)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(img)
	b, err := ukiread.Locate(r)
	if err != nil {
		t.Fatalf("Locate: %v", err)
	}
	kernel, err := io.ReadAll(b.Kernel.Reader(r))
	if err != nil {
		t.Fatal(err)
	}
	initramfs, err := io.ReadAll(b.Initramfs.Reader(r))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kernel, s[4].Data) || !bytes.Equal(initramfs, s[3].Data) || b.Cmdline != string(s[1].Data) {
		t.Errorf("Locate = kernel of %d bytes, initramfs of %d bytes, cmdline %q; want %d, %d, %q",
			len(kernel), len(initramfs), b.Cmdline, len(s[4].Data), len(s[3].Data), s[1].Data)
	}
	noKernel, err := Build(tinyStub(0x1000), s[:4])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ukiread.Locate(bytes.NewReader(noKernel)); err == nil || !strings.Contains(err.Error(), ".linux") {
		t.Errorf("Locate of an image without .linux = %v, want an error naming it", err)
	}
	f, err := pe.NewFile(r)
	if err != nil {
		t.Fatal(err)
	}
	cut := img[:f.Section(".cmdline").Offset+3]
	if _, err := ukiread.Locate(bytes.NewReader(cut)); err == nil || !strings.Contains(err.Error(), ".cmdline") {
		t.Errorf("Locate of an image cut within .cmdline = %v, want an error naming it", err)
	}
	if _, err := ukiread.Locate(bytes.NewReader([]byte("not a PE file"))); err == nil {
		t.Error("Locate of garbage succeeded")
	}
}
