package verity

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
)

const (
	// BlockSize is the size of both the data blocks and the hash blocks.
	BlockSize = 4096
	// DigestSize is the size of one SHA-256 digest, and of the root hash.
	DigestSize = sha256.Size
	// Algorithm is the hash's name in a dm-verity table.
	Algorithm = "sha256"
	// Version is the hash format of a dm-verity table: 1, the salt goes
	// before the block.
	Version = 1
	// MaxSaltSize is the longest salt veritysetup accepts.
	MaxSaltSize = 256
	// maxDataBlocks keeps every byte count of a tree within 64 bits.
	maxDataBlocks = 1 << 40

	digestsPerBlock = BlockSize / DigestSize
)

// A Tree is the hash tree of one image.
type Tree struct {
	// Hashes is the hash area: every level of the tree, top level first,
	// each a whole number of blocks. Empty for an image of one block,
	// whose root hash is that block's own.
	Hashes []byte
	// RootHash is the digest of the top level block.
	RootHash []byte
	// DataBlocks is the number of data blocks hashed.
	DataBlocks uint64
}

// Params returns what a node needs to check the image, with the tree
// stored right after the data on the same device.
func (t *Tree) Params(salt []byte) Params {
	return Params{
		RootHash:   t.RootHash,
		Salt:       salt,
		DataBlocks: t.DataBlocks,
		HashOffset: t.DataBlocks * BlockSize,
	}
}

// hasher hashes salted blocks.
type hasher struct {
	h    hash.Hash
	salt []byte
}

func (s *hasher) sum(dst, block []byte) []byte {
	s.h.Reset()
	s.h.Write(s.salt)
	s.h.Write(block)
	return s.h.Sum(dst)
}

// Compute reads data to its end, whose length must be a whole, non-zero
// number of blocks, and returns its hash tree under salt.
func Compute(data io.Reader, salt []byte) (*Tree, error) {
	if len(salt) > MaxSaltSize {
		return nil, fmt.Errorf("salt of %d bytes is longer than %d", len(salt), MaxSaltSize)
	}
	hs := &hasher{h: sha256.New(), salt: salt}
	block := make([]byte, BlockSize)
	var level []byte
	var blocks uint64
	for {
		n, err := io.ReadFull(data, block)
		if err == io.EOF {
			break
		}
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("data ends %d bytes into block %d: not a whole number of %d-byte blocks", n, blocks, BlockSize)
		}
		if err != nil {
			return nil, fmt.Errorf("when reading data block %d: %w", blocks, err)
		}
		if blocks++; blocks > maxDataBlocks {
			return nil, fmt.Errorf("data is longer than %d blocks", uint64(maxDataBlocks))
		}
		level = hs.sum(level, block)
	}
	if blocks == 0 {
		return nil, errors.New("no data to hash")
	}
	t := &Tree{DataBlocks: blocks}
	if blocks == 1 {
		t.RootHash = level
		return t, nil
	}
	// Each pass pads the digests of one level to whole blocks, keeps
	// them, and hashes those blocks into the level above, until a level
	// fits one block: its digest is the root hash.
	var levels [][]byte
	for {
		level = padToBlock(level)
		levels = append(levels, level)
		if len(level) == BlockSize {
			t.RootHash = hs.sum(nil, level)
			break
		}
		var up []byte
		for off := 0; off < len(level); off += BlockSize {
			up = hs.sum(up, level[off:off+BlockSize])
		}
		level = up
	}
	for i := len(levels) - 1; i >= 0; i-- {
		t.Hashes = append(t.Hashes, levels[i]...)
	}
	return t, nil
}

func padToBlock(b []byte) []byte {
	if r := len(b) % BlockSize; r != 0 {
		b = append(b, make([]byte, BlockSize-r)...)
	}
	return b
}

// HashBlocks returns how many hash blocks the tree of dataBlocks data
// blocks takes.
func HashBlocks(dataBlocks uint64) uint64 {
	var total uint64
	for n := dataBlocks; n > 1; {
		n = (n + digestsPerBlock - 1) / digestsPerBlock
		total += n
	}
	return total
}
