package espimage

import (
	"encoding/binary"
	"fmt"
	"os"
)

// FAT32 keeps a hint of its free cluster count in the FS information
// sector. go-diskfs allocates clusters without updating it, which leaves
// the hint wrong after every write (fsck.fat complains, and Linux would
// report wrong free space). The specification allows "unknown"
// (0xFFFFFFFF) for both the count and the next-free hint, which makes
// every reader count for itself; forgetHints writes that.
const (
	fsinfoLeadSig   = 0x41615252
	fsinfoStructSig = 0x61417272
	fsinfoTrailSig  = 0xaa550000
	fsinfoUnknown   = 0xffffffff
)

// forgetHints marks the free cluster count and next-free hints of the
// FAT32 filesystem at byte offset start of the image at imagePath as
// unknown, in the primary FS information sector and its backup copy.
func forgetHints(imagePath string, start int64) (err error) {
	f, err := os.OpenFile(imagePath, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("when opening image: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("when closing image: %w", cerr)
		}
	}()
	boot := make([]byte, 512)
	if _, err := f.ReadAt(boot, start); err != nil {
		return fmt.Errorf("when reading the ESP boot sector: %w", err)
	}
	sectorSize := int64(binary.LittleEndian.Uint16(boot[11:13]))
	if sectorSize < 512 || sectorSize > 4096 || sectorSize&(sectorSize-1) != 0 {
		return fmt.Errorf("ESP boot sector gives a sector size of %d", sectorSize)
	}
	info := int64(binary.LittleEndian.Uint16(boot[48:50]))
	backup := int64(binary.LittleEndian.Uint16(boot[50:52]))
	sectors := []int64{info}
	if backup != 0 && backup != 0xffff {
		sectors = append(sectors, backup+info)
	}
	for _, s := range sectors {
		if err := forgetHintsAt(f, start+s*sectorSize); err != nil {
			return err
		}
	}
	return nil
}

// forgetHintsAt rewrites one FS information sector at off, after checking
// its signatures.
func forgetHintsAt(f *os.File, off int64) error {
	sec := make([]byte, 512)
	if _, err := f.ReadAt(sec, off); err != nil {
		return fmt.Errorf("when reading FS information sector: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint32(sec[0:4]) != fsinfoLeadSig || le.Uint32(sec[484:488]) != fsinfoStructSig || le.Uint32(sec[508:512]) != fsinfoTrailSig {
		return fmt.Errorf("no FS information sector at byte %d of the image", off)
	}
	le.PutUint32(sec[488:492], fsinfoUnknown)
	le.PutUint32(sec[492:496], fsinfoUnknown)
	if _, err := f.WriteAt(sec[488:496], off+488); err != nil {
		return fmt.Errorf("when writing FS information sector: %w", err)
	}
	return nil
}
