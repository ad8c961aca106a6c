package gpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// Device is what Write needs of a disk: *os.File on a block device or an
// image file.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// alignBytes is where new partitions start: on a MiB boundary, right for
// any sector size and any flash erase block of note.
const alignBytes = 1 << 20

// entrySectors is the size of t's entry array in sectors.
func (t *Table) entrySectors() uint64 {
	return sectorsFor(len(t.Entries)*entrySize, t.SectorSize)
}

// Grow moves the end of t's usable area to just before where the backup
// entry array goes on a disk of size bytes, and reports whether it moved.
// It never shrinks the table.
func (t *Table) Grow(size int64) bool {
	total := uint64(size) / uint64(t.SectorSize)
	if total < t.entrySectors()+3 {
		return false
	}
	last := total - 2 - t.entrySectors()
	if last <= t.LastUsableLBA {
		return false
	}
	t.LastUsableLBA = last
	return true
}

// Span is a run of free sectors, both ends inclusive.
type Span struct{ First, Last uint64 }

// FreeSpans lists the free runs of t's usable area, in disk order.
func (t *Table) FreeSpans() []Span {
	var spans []Span
	next := t.FirstUsableLBA
	for {
		// The used partition starting lowest at or after next.
		var p *Partition
		for i := range t.Entries {
			e := &t.Entries[i]
			if e.Type == uuid.Nil || e.LastLBA < next {
				continue
			}
			if p == nil || e.FirstLBA < p.FirstLBA {
				p = e
			}
		}
		if p == nil {
			if next <= t.LastUsableLBA {
				spans = append(spans, Span{next, t.LastUsableLBA})
			}
			return spans
		}
		if p.FirstLBA > next {
			spans = append(spans, Span{next, p.FirstLBA - 1})
		}
		next = max(next, p.LastLBA+1)
	}
}

// Find returns the index of the first partition of type typ, or -1.
func (t *Table) Find(typ uuid.UUID) int {
	for i, p := range t.Entries {
		if p.Type == typ {
			return i
		}
	}
	return -1
}

// ErrNoSpace is returned by Add when no free span is large enough.
var ErrNoSpace = errors.New("no free space large enough")

// Add places p, sized to fill it, in the largest free span that lies after
// every EFI system partition, its start aligned to 1 MiB. The span must
// hold at least minSectors after alignment. It returns p's entry index.
func (t *Table) Add(p Partition, minSectors uint64) (int, error) {
	slot := t.Find(uuid.Nil)
	if slot < 0 {
		return -1, errors.New("every entry of the partition table is used")
	}
	var after uint64
	for _, e := range t.Entries {
		if e.Type == TypeEFISystem {
			after = max(after, e.LastLBA+1)
		}
	}
	align := uint64(alignBytes / t.SectorSize)
	var best Span
	var bestLen uint64
	for _, s := range t.FreeSpans() {
		first := max(s.First, after)
		first = (first + align - 1) / align * align
		if first > s.Last {
			continue
		}
		if n := s.Last - first + 1; n > bestLen {
			best, bestLen = Span{first, s.Last}, n
		}
	}
	if bestLen == 0 || bestLen < minSectors {
		return -1, fmt.Errorf("%w: largest free span after the ESP has %d sectors, want %d", ErrNoSpace, bestLen, minSectors)
	}
	p.FirstLBA, p.LastLBA = best.First, best.Last
	if p.ID == uuid.Nil {
		p.ID = uuid.New()
	}
	t.Entries[slot] = p
	return slot, nil
}

// Write puts t onto a disk of size bytes: the backup entry array and
// header at the disk's end, then the primary entry array and header, each
// step made durable before the next (see the package documentation for
// why this order survives a power cut). Then it updates the protective
// MBR and zeroes the header of a backup left behind at a smaller disk's
// end.
func Write(dev Device, size int64, t *Table) error {
	ss := t.SectorSize
	total := uint64(size) / uint64(ss)
	es := t.entrySectors()
	if total < 2*es+3 {
		return fmt.Errorf("disk of %d sectors is too small for the table", total)
	}
	backupEntries := total - 1 - es
	switch {
	case t.LastUsableLBA >= backupEntries:
		return fmt.Errorf("usable area up to LBA %d overlaps the backup entries at %d", t.LastUsableLBA, backupEntries)
	case t.FirstUsableLBA < 2+es:
		return fmt.Errorf("usable area from LBA %d overlaps the primary entries", t.FirstUsableLBA)
	}
	entries, crc, err := t.marshalEntries()
	if err != nil {
		return err
	}
	h := header{
		firstUsable: t.FirstUsableLBA, lastUsable: t.LastUsableLBA,
		diskID: t.DiskID, numEntries: uint32(len(t.Entries)),
		entrySize: entrySize, entriesCRC: crc,
	}
	backup, primary := h, h
	backup.myLBA, backup.alternateLBA, backup.entriesLBA = total-1, primaryLBA, backupEntries
	primary.myLBA, primary.alternateLBA, primary.entriesLBA = primaryLBA, total-1, 2

	for i, step := range []header{backup, primary} {
		if err := writeSectors(dev, ss, step.entriesLBA, entries); err != nil {
			return fmt.Errorf("when writing entries (step %d): %w", i+1, err)
		}
		if err := writeSectors(dev, ss, step.myLBA, marshalHeader(step, ss)); err != nil {
			return fmt.Errorf("when writing header (step %d): %w", i+1, err)
		}
		if err := dev.Sync(); err != nil {
			return fmt.Errorf("when syncing (step %d): %w", i+1, err)
		}
	}
	old := t.backupLBA
	t.primaryValid, t.backupValid, t.backupLBA = true, true, total-1
	if err := writeProtectiveMBR(dev, ss, total); err != nil {
		return err
	}
	if old > primaryLBA && old < total-1 && old > t.FirstUsableLBA {
		if err := writeSectors(dev, ss, old, make([]byte, ss)); err != nil {
			return fmt.Errorf("when clearing the old backup header: %w", err)
		}
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("when syncing (step 3): %w", err)
	}
	return nil
}

func writeSectors(dev Device, ss int, lba uint64, b []byte) error {
	_, err := dev.WriteAt(b, int64(lba)*int64(ss))
	return err
}

// writeProtectiveMBR makes sector 0 a protective MBR covering the disk,
// keeping any boot code before the partition records.
func writeProtectiveMBR(dev Device, ss int, total uint64) error {
	mbr := make([]byte, ss)
	if _, err := dev.ReadAt(mbr, 0); err != nil {
		return fmt.Errorf("when reading the MBR: %w", err)
	}
	clear(mbr[446:mbrSignatureOff])
	rec := mbr[446:462]
	rec[1], rec[2], rec[3] = 0x00, 0x02, 0x00 // CHS of LBA 1
	rec[4] = protectiveType
	rec[5], rec[6], rec[7] = 0xff, 0xff, 0xff
	binary.LittleEndian.PutUint32(rec[8:], primaryLBA)
	binary.LittleEndian.PutUint32(rec[12:], uint32(min(total-1, 0xffffffff)))
	mbr[mbrSignatureOff], mbr[mbrSignatureOff+1] = 0x55, 0xaa
	if err := writeSectors(dev, ss, 0, mbr); err != nil {
		return fmt.Errorf("when writing the MBR: %w", err)
	}
	return nil
}

// NeedsWrite reports whether the disk of size bytes differs from what
// Write would put there: a damaged or misplaced table.
func (t *Table) NeedsWrite(size int64) bool {
	total := uint64(size) / uint64(t.SectorSize)
	return !t.primaryValid || !t.backupValid || t.backupLBA != total-1
}

// EnsurePartition makes sure the disk of size bytes has a partition of
// template's type, and returns it with its entry index. It is what a node
// runs on every boot: it completes a table a power cut left half-written,
// and, when the partition is missing, grows the table to the whole disk
// and adds the partition in the largest free span after the ESP. When the
// partition exists, only a damaged table is rewritten.
func EnsurePartition(dev Device, size int64, sectorSize int, template Partition, minSectors uint64) (Partition, int, error) {
	t, err := Read(dev, size, sectorSize)
	if err != nil {
		return Partition{}, -1, err
	}
	i := t.Find(template.Type)
	if i < 0 {
		t.Grow(size)
		if i, err = t.Add(template, minSectors); err != nil {
			return Partition{}, -1, err
		}
	} else if !t.NeedsWrite(size) {
		return t.Entries[i], i, nil
	}
	if err := Write(dev, size, t); err != nil {
		return Partition{}, -1, fmt.Errorf("when writing the partition table: %w", err)
	}
	return t.Entries[i], i, nil
}
