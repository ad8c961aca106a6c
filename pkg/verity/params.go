package verity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Params are what the kernel needs besides the device to check an image:
// the root hash, the salt, the image's length and where its tree starts.
type Params struct {
	// RootHash is the digest the whole tree hashes up to, DigestSize
	// bytes.
	RootHash []byte
	// Salt goes before every hashed block; at most MaxSaltSize bytes,
	// may be empty.
	Salt []byte
	// DataBlocks is the number of BlockSize blocks of data, from the
	// device's start.
	DataBlocks uint64
	// HashOffset is where the tree starts on the device, in bytes: a
	// whole number of blocks, at or after the end of the data.
	HashOffset uint64
}

// HashStartBlock is HashOffset in blocks, as a dm-verity table gives it.
func (p Params) HashStartBlock() uint64 { return p.HashOffset / BlockSize }

// End is the number of bytes the device must hold: the data and the tree
// after it.
func (p Params) End() uint64 { return p.HashOffset + HashBlocks(p.DataBlocks)*BlockSize }

// TopOffset is where, on the device, the block lies whose salted digest
// is the root hash: the top level of the tree, or the only data block of
// an image of one block, which has no tree.
func (p Params) TopOffset() uint64 {
	if p.DataBlocks == 1 {
		return 0
	}
	return p.HashOffset
}

// IsTop reports whether block, the BlockSize bytes read at TopOffset,
// hashes to the root hash. It is the cheapest test of whether a device
// holds the image at all, one block read and hashed: a device holding
// another image, or nothing, fails it. One that passes may still hold
// changed blocks below the top, which dm-verity refuses when they are
// read.
func (p Params) IsTop(block []byte) bool {
	if len(block) != BlockSize {
		return false
	}
	h := sha256.New()
	h.Write(p.Salt)
	h.Write(block)
	return bytes.Equal(h.Sum(nil), p.RootHash)
}

// String returns the text form ParseParams reads:
// "<root hash hex>,<salt hex>,<data blocks>,<hash offset>".
func (p Params) String() string {
	return hex.EncodeToString(p.RootHash) + "," + hex.EncodeToString(p.Salt) + "," +
		strconv.FormatUint(p.DataBlocks, 10) + "," + strconv.FormatUint(p.HashOffset, 10)
}

// Check reports whether p describes a tree the kernel can use and that
// lies after the data.
func (p Params) Check() error {
	switch {
	case len(p.RootHash) != DigestSize:
		return fmt.Errorf("root hash of %d bytes, want %d", len(p.RootHash), DigestSize)
	case len(p.Salt) > MaxSaltSize:
		return fmt.Errorf("salt of %d bytes is longer than %d", len(p.Salt), MaxSaltSize)
	case p.DataBlocks == 0 || p.DataBlocks > maxDataBlocks:
		return fmt.Errorf("%d data blocks, want 1 to %d", p.DataBlocks, uint64(maxDataBlocks))
	case p.HashOffset%BlockSize != 0:
		return fmt.Errorf("hash offset %d is not a multiple of %d", p.HashOffset, BlockSize)
	case p.HashOffset < p.DataBlocks*BlockSize:
		return fmt.Errorf("hash offset %d lies inside the %d data blocks", p.HashOffset, p.DataBlocks)
	case p.HashOffset > maxDataBlocks*BlockSize:
		return fmt.Errorf("hash offset %d is beyond %d blocks", p.HashOffset, uint64(maxDataBlocks))
	}
	return nil
}

// ParseParams reads the text form of Params, as String writes it, and
// checks it. It is given what a node's command line says, so every field
// is checked.
func ParseParams(s string) (Params, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return Params{}, fmt.Errorf("verity parameters %q: want root hash, salt, data blocks and hash offset, separated by commas", s)
	}
	var p Params
	var err error
	if p.RootHash, err = hex.DecodeString(f[0]); err != nil {
		return Params{}, fmt.Errorf("when reading the verity root hash: %w", err)
	}
	if p.Salt, err = hex.DecodeString(f[1]); err != nil {
		return Params{}, fmt.Errorf("when reading the verity salt: %w", err)
	}
	if p.DataBlocks, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return Params{}, fmt.Errorf("when reading the verity data blocks: %w", err)
	}
	if p.HashOffset, err = strconv.ParseUint(f[3], 10, 64); err != nil {
		return Params{}, fmt.Errorf("when reading the verity hash offset: %w", err)
	}
	if err := p.Check(); err != nil {
		return Params{}, fmt.Errorf("when checking the verity parameters: %w", err)
	}
	return p, nil
}
