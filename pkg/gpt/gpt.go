package gpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf16"

	"github.com/google/uuid"
)

// Well-known partition types.
var (
	// TypeEFISystem is the EFI system partition (ESP).
	TypeEFISystem = uuid.MustParse("c12a7328-f81f-11d2-ba4b-00a0c93ec93b")
	// TypeCairnData is Cairn's data partition: dm-crypt (or, when the
	// cluster allows it, plain XFS) holding everything a node keeps
	// beyond its ESP. Chosen at random once; never change it.
	TypeCairnData = uuid.MustParse("a5fbd38e-5227-4b36-b150-c764b3687500")
	// TypeCairnSystemA is the first slot of Cairn's system partition:
	// a read-only EROFS image followed by its dm-verity hash tree,
	// checked against the root hash on the unified kernel image's
	// command line. Chosen at random once; never change it.
	TypeCairnSystemA = uuid.MustParse("6f676cdc-3ec5-4084-9524-76e345cc9db2")
	// TypeCairnSystemB is the second slot of the system partition, the
	// same size as the first, for A/B updates. Chosen at random once;
	// never change it.
	TypeCairnSystemB = uuid.MustParse("7fc5ae28-138e-49b0-9ac8-73513d5b459a")
)

const (
	signature       = "EFI PART"
	revision        = 0x00010000
	headerSize      = 92
	entrySize       = 128
	defaultEntries  = 128
	maxEntryBytes   = 1 << 20 // refuse larger entry arrays from disk
	nameUnits       = 36
	primaryLBA      = 1
	protectiveType  = 0xee
	mbrSignatureOff = 510
)

// ErrInvalid is wrapped by errors about headers or entry arrays that fail
// their checks.
var ErrInvalid = errors.New("invalid GPT")

// Partition is one used entry of a table.
type Partition struct {
	// Type says what the partition holds (TypeEFISystem, ...).
	Type uuid.UUID
	// ID is the partition's own unique GUID (PARTUUID).
	ID uuid.UUID
	// FirstLBA and LastLBA are the partition's first and last sectors,
	// inclusive.
	FirstLBA, LastLBA uint64
	// Attributes are the entry's attribute bits.
	Attributes uint64
	// Name is the partition name, at most 36 UTF-16 code units.
	Name string
}

// Sectors is the partition's length in sectors.
func (p *Partition) Sectors() uint64 { return p.LastLBA - p.FirstLBA + 1 }

// Table is a GPT as read from or to be written to one disk.
type Table struct {
	// DiskID is the disk's GUID.
	DiskID uuid.UUID
	// SectorSize is the logical sector size in bytes, 512 or 4096.
	SectorSize int
	// FirstUsableLBA and LastUsableLBA bound where partitions may lie.
	FirstUsableLBA, LastUsableLBA uint64
	// Entries holds every entry slot of the array, in order; a slot with
	// a zero Type is unused. Its length is the array's entry count.
	Entries []Partition

	// Where the table was read from, so that Write can tell whether the
	// backup moves and clean up after it.
	backupLBA    uint64
	primaryValid bool
	backupValid  bool
}

// Recovered reports whether Read found the primary damaged and took the
// table from the backup: Write then restores the primary.
func (t *Table) Recovered() bool { return !t.primaryValid }

// header is the on-disk GPT header.
type header struct {
	myLBA, alternateLBA     uint64
	firstUsable, lastUsable uint64
	diskID                  uuid.UUID
	entriesLBA              uint64
	numEntries, entrySize   uint32
	entriesCRC              uint32
}

// GUIDToDisk and GUIDFromDisk convert between RFC 4122 byte order and the
// GPT's, whose first three fields are little-endian. UEFI stores every
// GUID so (EFI_GUID), device paths' partition signatures among them.
func GUIDToDisk(g uuid.UUID) [16]byte {
	var d [16]byte
	d[0], d[1], d[2], d[3] = g[3], g[2], g[1], g[0]
	d[4], d[5] = g[5], g[4]
	d[6], d[7] = g[7], g[6]
	copy(d[8:], g[8:])
	return d
}

func GUIDFromDisk(d []byte) uuid.UUID {
	var g uuid.UUID
	g[0], g[1], g[2], g[3] = d[3], d[2], d[1], d[0]
	g[4], g[5] = d[5], d[4]
	g[6], g[7] = d[7], d[6]
	copy(g[8:], d[8:16])
	return g
}

// parseHeader checks and decodes the header in sector, read from lba of a
// disk of totalSectors.
func parseHeader(sector []byte, lba, totalSectors uint64) (header, error) {
	le := binary.LittleEndian
	if len(sector) < headerSize || string(sector[:8]) != signature {
		return header{}, fmt.Errorf("%w: no signature at LBA %d", ErrInvalid, lba)
	}
	size := le.Uint32(sector[12:])
	if size < headerSize || int(size) > len(sector) {
		return header{}, fmt.Errorf("%w: header size %d at LBA %d", ErrInvalid, size, lba)
	}
	h := make([]byte, size)
	copy(h, sector)
	want := le.Uint32(h[16:])
	clear(h[16:20])
	if got := crc32.ChecksumIEEE(h); got != want {
		return header{}, fmt.Errorf("%w: header CRC %#08x at LBA %d, want %#08x", ErrInvalid, got, lba, want)
	}
	hd := header{
		myLBA:        le.Uint64(h[24:]),
		alternateLBA: le.Uint64(h[32:]),
		firstUsable:  le.Uint64(h[40:]),
		lastUsable:   le.Uint64(h[48:]),
		diskID:       GUIDFromDisk(h[56:72]),
		entriesLBA:   le.Uint64(h[72:]),
		numEntries:   le.Uint32(h[80:]),
		entrySize:    le.Uint32(h[84:]),
		entriesCRC:   le.Uint32(h[88:]),
	}
	switch {
	case hd.myLBA != lba:
		return header{}, fmt.Errorf("%w: header at LBA %d says it is at %d", ErrInvalid, lba, hd.myLBA)
	case hd.entrySize < entrySize || hd.entrySize%8 != 0:
		return header{}, fmt.Errorf("%w: entry size %d", ErrInvalid, hd.entrySize)
	case uint64(hd.numEntries)*uint64(hd.entrySize) > maxEntryBytes || hd.numEntries == 0:
		return header{}, fmt.Errorf("%w: %d entries of %d bytes", ErrInvalid, hd.numEntries, hd.entrySize)
	case hd.firstUsable > hd.lastUsable || hd.lastUsable >= totalSectors || hd.firstUsable < 2:
		return header{}, fmt.Errorf("%w: usable LBAs %d to %d on a disk of %d", ErrInvalid, hd.firstUsable, hd.lastUsable, totalSectors)
	case hd.entriesLBA < 2 || hd.entriesLBA >= totalSectors:
		return header{}, fmt.Errorf("%w: entries at LBA %d", ErrInvalid, hd.entriesLBA)
	}
	return hd, nil
}

// marshalHeader encodes h into a sector of size ss.
func marshalHeader(h header, ss int) []byte {
	le := binary.LittleEndian
	b := make([]byte, ss)
	copy(b, signature)
	le.PutUint32(b[8:], revision)
	le.PutUint32(b[12:], headerSize)
	le.PutUint64(b[24:], h.myLBA)
	le.PutUint64(b[32:], h.alternateLBA)
	le.PutUint64(b[40:], h.firstUsable)
	le.PutUint64(b[48:], h.lastUsable)
	id := GUIDToDisk(h.diskID)
	copy(b[56:72], id[:])
	le.PutUint64(b[72:], h.entriesLBA)
	le.PutUint32(b[80:], h.numEntries)
	le.PutUint32(b[84:], h.entrySize)
	le.PutUint32(b[88:], h.entriesCRC)
	le.PutUint32(b[16:], crc32.ChecksumIEEE(b[:headerSize]))
	return b
}

// parseEntries decodes an entry array checked against h.
func parseEntries(b []byte, h header) ([]Partition, error) {
	n := int(h.numEntries) * int(h.entrySize)
	if len(b) < n {
		return nil, fmt.Errorf("%w: entry array of %d bytes, want %d", ErrInvalid, len(b), n)
	}
	if got := crc32.ChecksumIEEE(b[:n]); got != h.entriesCRC {
		return nil, fmt.Errorf("%w: entry array CRC %#08x, want %#08x", ErrInvalid, got, h.entriesCRC)
	}
	le := binary.LittleEndian
	entries := make([]Partition, h.numEntries)
	for i := range entries {
		e := b[i*int(h.entrySize):]
		p := Partition{
			Type:       GUIDFromDisk(e[0:16]),
			ID:         GUIDFromDisk(e[16:32]),
			FirstLBA:   le.Uint64(e[32:]),
			LastLBA:    le.Uint64(e[40:]),
			Attributes: le.Uint64(e[48:]),
		}
		if p.Type == uuid.Nil {
			continue
		}
		if p.FirstLBA > p.LastLBA || p.FirstLBA < h.firstUsable || p.LastLBA > h.lastUsable {
			return nil, fmt.Errorf("%w: entry %d spans LBAs %d to %d, outside %d to %d",
				ErrInvalid, i, p.FirstLBA, p.LastLBA, h.firstUsable, h.lastUsable)
		}
		units := make([]uint16, 0, nameUnits)
		for j := 0; j < nameUnits; j++ {
			u := le.Uint16(e[56+2*j:])
			if u == 0 {
				break
			}
			units = append(units, u)
		}
		p.Name = string(utf16.Decode(units))
		entries[i] = p
	}
	return entries, nil
}

// marshalEntries encodes t's entries, padded to whole sectors.
func (t *Table) marshalEntries() ([]byte, uint32, error) {
	n := len(t.Entries) * entrySize
	b := make([]byte, sectorsFor(n, t.SectorSize)*uint64(t.SectorSize))
	le := binary.LittleEndian
	for i, p := range t.Entries {
		if p.Type == uuid.Nil {
			continue
		}
		e := b[i*entrySize:]
		ty, id := GUIDToDisk(p.Type), GUIDToDisk(p.ID)
		copy(e[0:16], ty[:])
		copy(e[16:32], id[:])
		le.PutUint64(e[32:], p.FirstLBA)
		le.PutUint64(e[40:], p.LastLBA)
		le.PutUint64(e[48:], p.Attributes)
		units := utf16.Encode([]rune(p.Name))
		if len(units) > nameUnits {
			return nil, 0, fmt.Errorf("partition name %q is longer than %d UTF-16 units", p.Name, nameUnits)
		}
		for j, u := range units {
			le.PutUint16(e[56+2*j:], u)
		}
	}
	return b, crc32.ChecksumIEEE(b[:n]), nil
}

func sectorsFor(bytes, ss int) uint64 { return uint64((bytes + ss - 1) / ss) }

// Read reads the GPT of a disk of size bytes with sectors of sectorSize.
// It trusts the primary table when it is valid; otherwise it takes the
// backup at the disk's last LBA and marks the table Recovered.
func Read(r io.ReaderAt, size int64, sectorSize int) (*Table, error) {
	if sectorSize != 512 && sectorSize != 4096 {
		return nil, fmt.Errorf("sector size %d is neither 512 nor 4096", sectorSize)
	}
	total := uint64(size) / uint64(sectorSize)
	if total < 6 {
		return nil, fmt.Errorf("disk of %d bytes is too small for a GPT", size)
	}
	t, perr := readAt(r, primaryLBA, total, sectorSize)
	if perr == nil {
		t.primaryValid = true
		if _, berr := readAt(r, t.backupLBA, total, sectorSize); berr == nil {
			t.backupValid = true
		}
		return t, nil
	}
	t, berr := readAt(r, total-1, total, sectorSize)
	if berr != nil {
		return nil, fmt.Errorf("no valid GPT: primary: %w; backup at the disk's end: %w", perr, berr)
	}
	t.backupValid = true
	t.backupLBA = total - 1
	return t, nil
}

// readAt reads one header at lba and its entry array.
func readAt(r io.ReaderAt, lba, total uint64, ss int) (*Table, error) {
	sector := make([]byte, ss)
	if _, err := r.ReadAt(sector, int64(lba)*int64(ss)); err != nil {
		return nil, fmt.Errorf("when reading LBA %d: %w", lba, err)
	}
	h, err := parseHeader(sector, lba, total)
	if err != nil {
		return nil, err
	}
	n := int(h.numEntries) * int(h.entrySize)
	if h.entriesLBA+sectorsFor(n, ss) > total {
		return nil, fmt.Errorf("%w: entry array at LBA %d runs past the disk", ErrInvalid, h.entriesLBA)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, int64(h.entriesLBA)*int64(ss)); err != nil {
		return nil, fmt.Errorf("when reading the entry array at LBA %d: %w", h.entriesLBA, err)
	}
	entries, err := parseEntries(b, h)
	if err != nil {
		return nil, err
	}
	return &Table{
		DiskID:         h.diskID,
		SectorSize:     ss,
		FirstUsableLBA: h.firstUsable,
		LastUsableLBA:  h.lastUsable,
		Entries:        entries,
		backupLBA:      h.alternateLBA,
	}, nil
}
