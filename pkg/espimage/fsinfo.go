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
// every reader count for itself; tidyFAT writes that.
const (
	fsinfoLeadSig   = 0x41615252
	fsinfoStructSig = 0x61417272
	fsinfoTrailSig  = 0xaa550000
	fsinfoUnknown   = 0xffffffff
)

// tidyFAT leaves the FAT32 filesystem at byte offset start of the image
// at imagePath as fsck.fat wants it after go-diskfs wrote it: it marks the
// free cluster count and next-free hints unknown, in the primary FS
// information sector and its backup copy, and corrects the ".." entries
// of the root's directories (fixDotDot).
func tidyFAT(imagePath string, start int64) (err error) {
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
	return fixDotDot(f, start, boot)
}

// fixDotDot corrects the ".." entries of the root's subdirectories:
// go-diskfs gives them the root's cluster number, where FAT says 0 stands
// for the root (fsck.fat repairs it; Linux reads either). Only the root
// directory's first cluster is looked at, which holds every directory a
// Cairn image makes there.
func fixDotDot(f *os.File, start int64, boot []byte) error {
	le := binary.LittleEndian
	sectorSize := int64(le.Uint16(boot[11:13]))
	clusterSize := int64(boot[13]) * sectorSize
	data := start + (int64(le.Uint16(boot[14:16]))+int64(boot[16])*int64(le.Uint32(boot[36:40])))*sectorSize
	root := le.Uint32(boot[44:48])
	if clusterSize == 0 || root < 2 {
		return fmt.Errorf("ESP boot sector gives clusters of %d bytes and root cluster %d", clusterSize, root)
	}
	at := func(cluster uint32) int64 { return data + int64(cluster-2)*clusterSize }
	dir := make([]byte, clusterSize)
	if _, err := f.ReadAt(dir, at(root)); err != nil {
		return fmt.Errorf("when reading the root directory: %w", err)
	}
	for e := dir; len(e) >= 32 && e[0] != 0; e = e[32:] {
		attr := e[11]
		if e[0] == 0xe5 || attr == 0x0f || attr&0x10 == 0 {
			continue // deleted, a long name's part, or not a directory
		}
		cluster := uint32(le.Uint16(e[20:22]))<<16 | uint32(le.Uint16(e[26:28]))
		if cluster < 2 {
			continue
		}
		dots := make([]byte, 64)
		if _, err := f.ReadAt(dots, at(cluster)); err != nil {
			return fmt.Errorf("when reading a directory of the root: %w", err)
		}
		up := dots[32:]
		if string(up[:11]) != "..         " || uint32(le.Uint16(up[20:22]))<<16|uint32(le.Uint16(up[26:28])) != root {
			continue
		}
		zero := make([]byte, 2)
		for _, off := range []int64{20, 26} {
			if _, err := f.WriteAt(zero, at(cluster)+32+off); err != nil {
				return fmt.Errorf("when writing a directory's \"..\" entry: %w", err)
			}
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
