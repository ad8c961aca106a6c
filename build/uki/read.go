package uki

import (
	"debug/pe"
	"fmt"
	"io"
	"strings"
)

// Boot is what a unified kernel image boots: the pieces the stub hands to
// the kernel.
type Boot struct {
	Kernel    []byte
	Initramfs []byte
	// Cmdline is the kernel command line, without trailing NULs or
	// whitespace.
	Cmdline string
}

// Read reads the kernel, the initramfs and the command line out of a
// unified kernel image, as Build wrote them: a node uses it to boot its own
// image again with kexec, without the firmware.
func Read(r io.ReaderAt) (*Boot, error) {
	f, err := pe.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("when reading the PE headers: %w", err)
	}
	defer f.Close()
	section := func(name string) ([]byte, error) {
		s := f.Section(name)
		if s == nil {
			return nil, fmt.Errorf("no %s section", name)
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("when reading the %s section: %w", name, err)
		}
		// The file holds the section padded to the file alignment; its
		// virtual size is its own.
		if int(s.VirtualSize) < len(b) {
			b = b[:s.VirtualSize]
		}
		return b, nil
	}
	var b Boot
	if b.Kernel, err = section(".linux"); err != nil {
		return nil, err
	}
	if b.Initramfs, err = section(".initrd"); err != nil {
		return nil, err
	}
	cmdline, err := section(".cmdline")
	if err != nil {
		return nil, err
	}
	b.Cmdline = strings.TrimRight(string(cmdline), "\x00 \n")
	return &b, nil
}
