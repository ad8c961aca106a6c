// Package uki assembles a unified kernel image: systemd's EFI stub with the
// kernel, the initramfs, the kernel command line and an os-release appended
// as PE sections. UEFI firmware runs the result as one EFI application; the
// stub finds its sections by name and boots the kernel with them, so one
// file on the ESP is the whole boot chain and nothing is read from an
// editable boot loader config.
//
//	linuxx64.efi.stub  ─┐
//	os-release   .osrel ─┤
//	cmdline    .cmdline ─┤
//	release      .uname ─┼─▶ Build ─▶ BOOTX64.EFI
//	initramfs   .initrd ─┤
//	vmlinuz      .linux ─┘
//
// pkg/uki reads them back: a node finds its kernel, initramfs and command
// line there to kexec into its own image.
//
// The sections are written in Go rather than with objcopy: their places
// follow from the stub's own headers (the end of its last section, its
// section and file alignment), the result has no timestamp, and the same
// inputs give the same bytes.
package uki

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"errors"
	"fmt"
)

// A Section is one PE section to append to the stub.
type Section struct {
	// Name is the section name, at most eight bytes (".linux").
	Name string
	// Data is the section's content.
	Data []byte
}

// Sections returns the sections of a unified kernel image in the order
// systemd's ukify writes them, the kernel last.
func Sections(osRelease, cmdline, release, initramfs, kernel []byte) []Section {
	return []Section{
		{".osrel", osRelease},
		{".cmdline", cmdline},
		{".uname", release},
		{".initrd", initramfs},
		{".linux", kernel},
	}
}

// Offsets of PE header fields this package reads or writes.
const (
	peSignatureSize = 4
	coffHeaderSize  = 20
	sectionHdrSize  = 40
	// Within the PE32+ optional header.
	optInitDataSize   = 8
	optSectionAlign   = 32
	optFileAlign      = 36
	optSizeOfImage    = 56
	optSizeOfHeaders  = 60
	optCheckSum       = 64
	optDataDirs       = 112
	securityDirectory = 4
	// IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ
	readOnlyData = 0x40000040
	// pageSize is the least alignment given to appended sections, so every
	// one of them starts on its own page whatever the stub's alignment.
	pageSize = 4096
)

// Build appends sections to stub, a PE32+ EFI application, and returns the
// new image. The stub must have room for the extra section headers in its
// header area and must not be signed (a signature covers the image as it
// was and would no longer match).
func Build(stub []byte, sections []Section) ([]byte, error) {
	f, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		return nil, fmt.Errorf("when parsing the EFI stub: %w", err)
	}
	defer f.Close()
	opt, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		return nil, errors.New("EFI stub is not a PE32+ image")
	}
	if sec := opt.DataDirectory[securityDirectory]; sec.Size != 0 {
		return nil, errors.New("EFI stub is signed; appending sections would break the signature")
	}
	// Images keep nothing the loader needs after their last section but a
	// COFF symbol table, which some stubs still carry. It is dropped: the
	// new sections take its place.
	var rawEnd uint32
	for _, s := range f.Sections {
		rawEnd = max(rawEnd, s.Offset+s.Size)
	}
	symbols := f.FileHeader.PointerToSymbolTable
	switch {
	case symbols != 0 && symbols < rawEnd:
		return nil, errors.New("EFI stub's symbol table overlaps its sections")
	case symbols == 0 && int(rawEnd) < len(stub):
		return nil, fmt.Errorf("EFI stub has %d unknown bytes after its sections", len(stub)-int(rawEnd))
	case int(rawEnd) > len(stub):
		return nil, errors.New("EFI stub is truncated")
	}

	out := bytes.Clone(stub[:rawEnd])
	peOff := int(binary.LittleEndian.Uint32(stub[0x3c:]))
	optOff := peOff + peSignatureSize + coffHeaderSize
	tableOff := optOff + int(f.FileHeader.SizeOfOptionalHeader)
	headerEnd := tableOff + sectionHdrSize*(len(f.Sections)+len(sections))
	if headerEnd > int(opt.SizeOfHeaders) {
		return nil, fmt.Errorf("EFI stub's headers (%d bytes) have no room for %d more sections", opt.SizeOfHeaders, len(sections))
	}
	for _, s := range f.Sections {
		if int(s.Offset) > 0 && int(s.Offset) < headerEnd {
			return nil, fmt.Errorf("EFI stub section %s starts inside the grown header", s.Name)
		}
	}

	secAlign := max(uint32(pageSize), opt.SectionAlignment)
	fileAlign := opt.FileAlignment
	if fileAlign == 0 || opt.SectionAlignment == 0 {
		return nil, errors.New("EFI stub has no section or file alignment")
	}
	// The new sections go after the last byte the stub occupies in memory
	// and in the file.
	var nextVA uint32
	for _, s := range f.Sections {
		nextVA = max(nextVA, s.VirtualAddress+max(s.VirtualSize, s.Size))
	}
	nextVA = alignUp(nextVA, secAlign)
	initData := opt.SizeOfInitializedData
	for i, s := range sections {
		if len(s.Name) == 0 || len(s.Name) > 8 {
			return nil, fmt.Errorf("section name %q is not 1 to 8 bytes", s.Name)
		}
		rawOff := alignUp(uint32(len(out)), fileAlign)
		rawSize := alignUp(uint32(len(s.Data)), fileAlign)
		if uint64(rawOff)+uint64(rawSize) > 1<<32-1 {
			return nil, errors.New("unified kernel image would exceed 4 GiB")
		}
		out = append(out, make([]byte, int(rawOff)-len(out))...)
		out = append(out, s.Data...)
		out = append(out, make([]byte, int(rawSize)-len(s.Data))...)

		hdr := out[tableOff+sectionHdrSize*(len(f.Sections)+i):]
		clear(hdr[:sectionHdrSize])
		copy(hdr[0:8], s.Name)
		binary.LittleEndian.PutUint32(hdr[8:], uint32(len(s.Data))) // VirtualSize
		binary.LittleEndian.PutUint32(hdr[12:], nextVA)             // VirtualAddress
		binary.LittleEndian.PutUint32(hdr[16:], rawSize)            // SizeOfRawData
		binary.LittleEndian.PutUint32(hdr[20:], rawOff)             // PointerToRawData
		binary.LittleEndian.PutUint32(hdr[36:], readOnlyData)       // Characteristics
		nextVA = alignUp(nextVA+uint32(len(s.Data)), secAlign)
		initData += rawSize
	}

	le := binary.LittleEndian
	coff := peOff + peSignatureSize
	le.PutUint16(out[coff+2:], uint16(len(f.Sections)+len(sections)))
	le.PutUint32(out[coff+8:], 0)  // PointerToSymbolTable
	le.PutUint32(out[coff+12:], 0) // NumberOfSymbols
	le.PutUint32(out[optOff+optInitDataSize:], initData)
	le.PutUint32(out[optOff+optSizeOfImage:], alignUp(nextVA, opt.SectionAlignment))
	le.PutUint32(out[optOff+optCheckSum:], 0)
	le.PutUint32(out[optOff+optCheckSum:], checksum(out, optOff+optCheckSum))
	return out, nil
}

func alignUp(n, align uint32) uint32 {
	return (n + align - 1) / align * align
}

// checksum computes the PE image checksum: the 16-bit one's complement
// style sum of the file (with the checksum field itself read as zero),
// folded, plus the file length.
func checksum(b []byte, checksumOff int) uint32 {
	var sum uint64
	for i := 0; i+1 < len(b); i += 2 {
		if i == checksumOff || i == checksumOff+2 {
			continue
		}
		sum += uint64(binary.LittleEndian.Uint16(b[i:]))
		sum = (sum & 0xffff) + (sum >> 16)
	}
	if len(b)%2 == 1 {
		sum += uint64(b[len(b)-1])
		sum = (sum & 0xffff) + (sum >> 16)
	}
	sum = (sum & 0xffff) + (sum >> 16)
	return uint32(sum) + uint32(len(b))
}

// OSRelease returns the os-release(5) text for the .osrel section: boot
// menus show it, and it names the Cairn build and the kernel inside.
func OSRelease(version, kernelRelease string) []byte {
	return fmt.Appendf(nil, "NAME=Cairn\nID=cairn\nVERSION_ID=%q\nPRETTY_NAME=%q\n",
		version, fmt.Sprintf("Cairn %s (kernel %s)", version, kernelRelease))
}
