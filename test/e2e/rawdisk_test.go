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

// rawDisk is what a look at a powered-off node's disk finds: the data
// partition's bytes and the rest of the disk's, to prove the search works.
type rawDisk struct {
	data, rest []byte
}

// readRawDisk reads the disk image at path and splits it at the Cairn data
// partition, which must exist.
func readRawDisk(path string) (rawDisk, error) {
	f, err := os.Open(path)
	if err != nil {
		return rawDisk{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rawDisk{}, err
	}
	table, err := gpt.Read(f, st.Size(), 512)
	if err != nil {
		return rawDisk{}, fmt.Errorf("when reading the GPT of %s: %w", path, err)
	}
	for _, p := range table.Entries {
		if p.Type != gpt.TypeCairnData {
			continue
		}
		start := int64(p.FirstLBA) * 512
		size := int64(p.Sectors()) * 512
		data := make([]byte, size)
		if _, err := f.ReadAt(data, start); err != nil && err != io.EOF {
			return rawDisk{}, fmt.Errorf("when reading the data partition: %w", err)
		}
		rest := make([]byte, start)
		if _, err := f.ReadAt(rest, 0); err != nil {
			return rawDisk{}, fmt.Errorf("when reading the disk before the data partition: %w", err)
		}
		return rawDisk{data: data, rest: rest}, nil
	}
	return rawDisk{}, fmt.Errorf("%s has no Cairn data partition", path)
}

// checkRawDisk looks at the disk of a powered-off node the way a thief
// would: its data partition must show no filesystem and none of the
// plaintext the node is known to keep there (its node ID, in its identity
// and in etcd; etcd's database magic). The same search over the ESP, which
// holds the node ID in the clear, proves the search itself works.
func checkRawDisk(t *testing.T, path, nodeID string) {
	t.Helper()
	d, err := readRawDisk(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(d.rest, []byte(nodeID)) {
		t.Fatalf("the ESP does not hold the node ID %s in the clear either: the search is broken", nodeID)
	}
	const payload = 2048 * 512 // where dm-crypt starts, past the header
	if len(d.data) <= payload {
		t.Fatalf("the data partition is only %d bytes", len(d.data))
	}
	if sig := d.data[payload : payload+4]; string(sig) == "XFSB" {
		t.Errorf("the data partition's payload starts with an XFS superblock: it is not encrypted")
	}
	for off := 0; off+4 <= len(d.data); off += 512 {
		if string(d.data[off:off+4]) == "XFSB" {
			t.Errorf("an XFS superblock in the clear at offset %d of the data partition", off)
			break
		}
	}
	if i := bytes.Index(d.data, []byte(nodeID)); i >= 0 {
		t.Errorf("the node ID %s in the clear at offset %d of the data partition", nodeID, i)
	}
	for off := 0; off+20 <= len(d.data); off += 4096 {
		if binary.LittleEndian.Uint32(d.data[off+16:]) == bboltMagic {
			t.Errorf("an etcd (bbolt) meta page in the clear at offset %d of the data partition", off)
			break
		}
	}
	t.Logf("data partition: %d MiB searched; no filesystem signature, node ID or etcd magic in the clear", len(d.data)>>20)
}
