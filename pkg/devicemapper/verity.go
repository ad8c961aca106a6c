package devicemapper

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Verity describes one dm-verity mapping: a read-only device whose every
// block is checked, when read, against a hash tree that hashes up to a
// root hash. Fields are the kernel's table arguments (format version 1,
// no optional arguments: a block that fails its check fails the read
// with EIO, and the device reports the corruption in its status).
type Verity struct {
	// DataDevice holds the data, as a path ("/dev/vda2") or
	// "major:minor".
	DataDevice string
	// HashDevice holds the hash tree; it may be DataDevice, with the
	// tree after the data.
	HashDevice string
	// DataBlockSize and HashBlockSize are the block sizes in bytes, a
	// power of two from 512 to the page size (4096).
	DataBlockSize, HashBlockSize uint32
	// DataBlocks is the number of data blocks, from DataDevice's start;
	// the mapped device is that long.
	DataBlocks uint64
	// HashStartBlock is where the tree starts on HashDevice, in hash
	// blocks.
	HashStartBlock uint64
	// Algorithm is the kernel's name of the hash ("sha256").
	Algorithm string
	// RootHash is the digest the tree hashes up to.
	RootHash []byte
	// Salt goes before every hashed block; empty for none.
	Salt []byte
}

// Sectors is the mapped device's length in 512-byte sectors.
func (v Verity) Sectors() uint64 { return v.DataBlocks * uint64(v.DataBlockSize) / 512 }

// verityTarget encodes v as the single target of a table:
//
//	0 <sectors> verity 1 <data dev> <hash dev> <data bs> <hash bs>
//	    <data blocks> <hash start> <algorithm> <root hex> <salt hex or ->
func (v Verity) verityTarget() (Target, error) {
	switch {
	case v.DataDevice == "" || v.HashDevice == "" || strings.ContainsAny(v.DataDevice+v.HashDevice, " \t\n"):
		return Target{}, fmt.Errorf("verity devices %q and %q must be named, without spaces", v.DataDevice, v.HashDevice)
	case !blockSizeOK(v.DataBlockSize) || !blockSizeOK(v.HashBlockSize):
		return Target{}, fmt.Errorf("verity block sizes %d and %d must be powers of two from 512 to 4096", v.DataBlockSize, v.HashBlockSize)
	case v.DataBlocks == 0 || v.DataBlocks > 1<<40:
		return Target{}, fmt.Errorf("verity mapping of %d data blocks", v.DataBlocks)
	case v.Algorithm == "" || strings.ContainsAny(v.Algorithm, " \t\n"):
		return Target{}, fmt.Errorf("verity hash algorithm %q", v.Algorithm)
	case len(v.RootHash) == 0:
		return Target{}, fmt.Errorf("verity mapping without a root hash")
	}
	salt := "-"
	if len(v.Salt) > 0 {
		salt = hex.EncodeToString(v.Salt)
	}
	params := strings.Join([]string{
		"1", v.DataDevice, v.HashDevice,
		strconv.FormatUint(uint64(v.DataBlockSize), 10), strconv.FormatUint(uint64(v.HashBlockSize), 10),
		strconv.FormatUint(v.DataBlocks, 10), strconv.FormatUint(v.HashStartBlock, 10),
		v.Algorithm, hex.EncodeToString(v.RootHash), salt,
	}, " ")
	return Target{Start: 0, Length: v.Sectors(), Type: "verity", Params: params}, nil
}

func blockSizeOK(n uint32) bool { return n >= 512 && n <= 4096 && n&(n-1) == 0 }

// VerityState is what a verity target's status says about the blocks it
// has read so far.
type VerityState int

const (
	// VerityVerified: every block read so far matched the tree ("V").
	VerityVerified VerityState = iota
	// VerityCorrupt: a block failed its check ("C"); the read of it
	// failed, and no wrong data was returned.
	VerityCorrupt
)

// ParseVerityStatus reads a verity target's status line: "V" or "C",
// possibly followed by fields of newer kernels.
func ParseVerityStatus(status string) (VerityState, error) {
	first, _, _ := strings.Cut(strings.TrimSpace(status), " ")
	switch first {
	case "V":
		return VerityVerified, nil
	case "C":
		return VerityCorrupt, nil
	}
	return 0, fmt.Errorf("%w: verity status %q", ErrMalformed, status)
}
