package uki

import (
	"crypto/sha256"
	"debug/pe"
	"fmt"
	"io"
)

// measuredSections are the sections systemd's EFI stub measures into PCR
// 11, in the order it measures them, as the stub Cairn builds with
// (Debian 12's systemd-boot-efi, systemd 252) does: other sections, such
// as .uname, are not measured by it.
var measuredSections = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrpkey"}

// PCR11 returns the SHA-256 bank's PCR 11 as the stub leaves it, from a
// PCR of zeros, once it has measured the unified kernel image r: for each
// of its measured sections, the section's name with its NUL, then its
// content as it lies in memory (its virtual size). A seal bound to PCR 11
// names this value. Firmware does not write PCR 11, so this is its value
// when /init starts, on a machine whose TPM the stub measured into.
func PCR11(r io.ReaderAt) ([sha256.Size]byte, error) {
	var pcr [sha256.Size]byte
	f, err := pe.NewFile(r)
	if err != nil {
		return pcr, fmt.Errorf("when reading the PE headers: %w", err)
	}
	defer f.Close()
	extend := func(digest []byte) {
		pcr = sha256.Sum256(append(pcr[:], digest...))
	}
	for _, name := range measuredSections {
		s := f.Section(name)
		if s == nil || s.VirtualSize == 0 {
			continue
		}
		h := sha256.Sum256(append([]byte(name), 0))
		extend(h[:])
		d := sha256.New()
		span := fileSpan(s)
		raw := span.Size
		n, err := io.Copy(d, span.Reader(r))
		if err == nil && n != raw {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return pcr, fmt.Errorf("when reading the %s section, %d of its %d bytes: %w", name, n, raw, err)
		}
		pad := int64(s.VirtualSize) - raw
		if pad > maxZeroFill {
			return pcr, fmt.Errorf("the %s section is %d bytes in memory, %d more than in the file: no unified kernel image's", name, s.VirtualSize, pad)
		}
		if pad > 0 {
			if _, err := io.CopyN(d, zeros{}, pad); err != nil {
				return pcr, err
			}
		}
		extend(d.Sum(nil))
	}
	return pcr, nil
}

// maxZeroFill is the most a section may be larger in memory than in the
// file, filled with zeros: a UKI's sections are their files' contents,
// and a garbled header must not make PCR11 hash gigabytes of zeros.
const maxZeroFill = 1 << 20

// zeros reads zeros.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
