// Package uki reads a unified kernel image: systemd's EFI stub with the
// kernel, the initramfs and the kernel command line appended as PE
// sections (build/uki writes them). Locate finds where the kernel and the
// initramfs lie in the image's file and reads its command line, so that a
// node can boot its own image again with kexec, without the firmware:
//
//	BOOTX64.EFI ─▶ Locate ─▶ Boot{Kernel, Initramfs: Spans in the file;
//	                              Cmdline}
//
// It reads only the PE headers and the command line: the kernel and the
// initramfs stay in the file, for the caller to copy where they go.
package uki

import (
	"debug/pe"
	"fmt"
	"io"
	"strings"
)

// Boot is where a unified kernel image keeps what it boots: the pieces the
// stub hands to the kernel.
type Boot struct {
	Kernel    Span
	Initramfs Span
	// Cmdline is the kernel command line, without trailing NULs or
	// whitespace.
	Cmdline string
}

// A Span is where a section's contents lie in the image's file.
type Span struct {
	Offset, Size int64
}

// Reader returns a reader of s's bytes in r.
func (s Span) Reader(r io.ReaderAt) *io.SectionReader {
	return io.NewSectionReader(r, s.Offset, s.Size)
}

// Locate finds the kernel and the initramfs in a unified kernel image, as
// build/uki's Build wrote them, and reads its command line: a node uses it to boot its
// own image again with kexec, without the firmware. It leaves the kernel
// and the initramfs in the file, for the caller to copy where they go.
func Locate(r io.ReaderAt) (*Boot, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("when reading the PE headers: %w", err)
	}
	defer f.Close()
	section := func(name string) (Span, error) {
		s := f.Section(name)
		if s == nil {
			return Span{}, fmt.Errorf("no %s section", name)
		}
		return fileSpan(s), nil
	}
	var b Boot
	if b.Kernel, err = section(".linux"); err != nil {
		return nil, err
	}
	if b.Initramfs, err = section(".initrd"); err != nil {
		return nil, err
	}
	span, err := section(".cmdline")
	if err != nil {
		return nil, err
	}
	cmdline, err := io.ReadAll(span.Reader(r))
	if err != nil {
		return nil, fmt.Errorf("when reading the .cmdline section: %w", err)
	}
	if int64(len(cmdline)) < span.Size {
		return nil, fmt.Errorf("the image ends %d bytes into its .cmdline section of %d", len(cmdline), span.Size)
	}
	b.Cmdline = strings.TrimRight(string(cmdline), "\x00 \n")
	return &b, nil
}

// fileSpan is where the file holds section s's own bytes. The file holds
// a section padded to the file alignment; its virtual size is its own, and
// a section larger in memory than in the file is zeros beyond it.
func fileSpan(s *pe.Section) Span {
	return Span{Offset: int64(s.Offset), Size: int64(min(s.Size, s.VirtualSize))}
}

// maxSmallSection bounds what Section reads: it is for the small
// sections (.pcrsig, .pcrpkey, .osrel), never the kernel's.
const maxSmallSection = 1 << 20

// Section returns the bytes of the section name of a unified kernel image
// as its file holds them (at most 1 MiB), or nil when it has none.
func Section(r io.ReaderAt, name string) ([]byte, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("when reading the PE headers: %w", err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil {
		return nil, nil
	}
	span := fileSpan(s)
	if span.Size > maxSmallSection {
		return nil, fmt.Errorf("the %s section has %d bytes, more than %d", name, span.Size, maxSmallSection)
	}
	b := make([]byte, span.Size)
	if _, err := span.Reader(r).ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("when reading the %s section: %w", name, err)
	}
	return b, nil
}
