//go:build e2e

package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"testing"

	"cairn.dev/cairn/pkg/gpt"
)

// bboltMagic opens the meta pages of etcd's database file (bbolt), at
// offset 16 of a page, little-endian.
const bboltMagic = 0xED0CDAED

// rawDisk is what a look at a powered-off node's disk finds: where the
// data partition lies, and the disk to read it and the rest from, to
// prove the search works.
type rawDisk struct {
	f                  *os.File
	dataStart, dataLen int64
}

// openRawDisk opens the disk image at path and finds the Cairn data
// partition, which must exist.
func openRawDisk(path string) (*rawDisk, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	table, err := gpt.Read(f, st.Size(), 512)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("when reading the GPT of %s: %w", path, err)
	}
	if i := table.Find(gpt.TypeCairnData); i >= 0 {
		p := table.Entries[i]
		return &rawDisk{f: f, dataStart: int64(p.FirstLBA) * 512, dataLen: int64(p.Sectors()) * 512}, nil
	}
	f.Close()
	return nil, fmt.Errorf("%s has no Cairn data partition", path)
}

// scanChunk and scanOverlap bound the memory a search takes: the disk is
// read scanChunk bytes at a time, each chunk starting scanOverlap bytes
// before the last one ended, on a 4096-byte boundary of the region, so
// that a pattern shorter than scanOverlap is seen whole in some chunk.
const (
	scanChunk   = 16 << 20
	scanOverlap = 4096
)

// scan calls visit with the bytes of the disk from off to off+size, in
// overlapping chunks, and where each chunk starts relative to off, until
// visit returns false.
func (d *rawDisk) scan(off, size int64, visit func(b []byte, at int64) bool) error {
	buf := make([]byte, scanChunk)
	for at := int64(0); at < size; at += scanChunk - scanOverlap {
		n := min(int64(scanChunk), size-at)
		if _, err := d.f.ReadAt(buf[:n], off+at); err != nil && err != io.EOF {
			return fmt.Errorf("when reading the disk at %d: %w", off+at, err)
		}
		if !visit(buf[:n], at) || at+n == size {
			return nil
		}
	}
	return nil
}

// checkRawDisk looks at the disk of a powered-off node the way a thief
// would: its data partition must show no filesystem and none of the
// plaintext the node is known to keep there (its node ID, in its identity
// and in etcd; etcd's database magic). The same search over the disk
// before it, whose ESP holds the node ID in the clear, proves the search
// itself works.
func checkRawDisk(t *testing.T, path, nodeID string) {
	t.Helper()
	d, err := openRawDisk(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.f.Close()
	id := []byte(nodeID)
	found := false
	if err := d.scan(0, d.dataStart, func(b []byte, _ int64) bool {
		found = bytes.Contains(b, id)
		return !found
	}); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("the ESP does not hold the node ID %s in the clear either: the search is broken", nodeID)
	}
	const payload = 2048 * 512 // where dm-crypt starts, past the header
	if d.dataLen <= payload {
		t.Fatalf("the data partition is only %d bytes", d.dataLen)
	}
	sig := make([]byte, 4)
	if _, err := d.f.ReadAt(sig, d.dataStart+payload); err != nil {
		t.Fatal(err)
	}
	if string(sig) == "XFSB" {
		t.Errorf("the data partition's payload starts with an XFS superblock: it is not encrypted")
	}
	var xfs, idFound, bbolt bool
	err = d.scan(d.dataStart, d.dataLen, func(b []byte, at int64) bool {
		for off := 0; !xfs && off+4 <= len(b); off += 512 {
			if string(b[off:off+4]) == "XFSB" {
				t.Errorf("an XFS superblock in the clear at offset %d of the data partition", at+int64(off))
				xfs = true
			}
		}
		if i := bytes.Index(b, id); !idFound && i >= 0 {
			t.Errorf("the node ID %s in the clear at offset %d of the data partition", nodeID, at+int64(i))
			idFound = true
		}
		for off := 0; !bbolt && off+20 <= len(b); off += 4096 {
			if binary.LittleEndian.Uint32(b[off+16:]) == bboltMagic {
				t.Errorf("an etcd (bbolt) meta page in the clear at offset %d of the data partition", at+int64(off))
				bbolt = true
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data partition: %d MiB searched; no filesystem signature, node ID or etcd magic in the clear", d.dataLen>>20)
}
