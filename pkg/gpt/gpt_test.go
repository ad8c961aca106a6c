package gpt

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	dgpt "github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

const (
	mib       = 1 << 20
	imageSize = 64 * mib
	espEnd    = 17*mib/512 - 1
)

var dataTemplate = Partition{Type: TypeCairnData, Name: "Cairn data"}

// builderImage writes a sparse image the way Cairn's image builder does:
// go-diskfs, a protective MBR, one ESP from 1 MiB to 17 MiB.
func builderImage(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	d, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatalf("creating image: %v", err)
	}
	err = d.Partition(&dgpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		Partitions: []*dgpt.Partition{{Index: 1, Start: 2048, End: espEnd, Type: dgpt.EFISystemPartition, Name: "EFI System Partition"}},
	})
	if err != nil {
		t.Fatalf("partitioning image: %v", err)
	}
	d.Close()
	return path
}

func openImage(t *testing.T, path string) (*os.File, int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("opening image: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatalf("stat image: %v", err)
	}
	return f, st.Size()
}

// checkBothValid reads the primary and the backup at the disk's last LBA
// on their own and wants them to agree.
func checkBothValid(t *testing.T, f *os.File, size int64) *Table {
	t.Helper()
	total := uint64(size / 512)
	p, err := readAt(f, 1, total, 512)
	if err != nil {
		t.Fatalf("primary: %v", err)
	}
	b, err := readAt(f, total-1, total, 512)
	if err != nil {
		t.Fatalf("backup at the disk's end: %v", err)
	}
	if p.backupLBA != total-1 {
		t.Errorf("primary points to its backup at %d, want %d", p.backupLBA, total-1)
	}
	if diff := cmp.Diff(p.Entries, b.Entries); diff != "" || p.LastUsableLBA != b.LastUsableLBA || p.DiskID != b.DiskID {
		t.Errorf("backup differs from primary (-primary +backup):\n%s", diff)
	}
	return p
}

func TestAddOnImageSizedDisk(t *testing.T) {
	path := builderImage(t, imageSize)
	f, size := openImage(t, path)
	p, i, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
	if err != nil {
		t.Fatalf("EnsurePartition: %v", err)
	}
	total := uint64(size / 512)
	if p.FirstLBA != espEnd+1 || p.LastLBA != total-34 || i != 1 {
		t.Errorf("data partition %d at %d..%d, want 1 at %d..%d", i, p.FirstLBA, p.LastLBA, espEnd+1, total-34)
	}
	tab := checkBothValid(t, f, size)
	if esp := tab.Entries[0]; esp.Type != TypeEFISystem || esp.FirstLBA != 2048 || esp.LastLBA != espEnd {
		t.Errorf("ESP entry became %+v", esp)
	}

	// The library the image builder uses must read our table too.
	d, err := diskfs.Open(path)
	if err != nil {
		t.Fatalf("diskfs.Open: %v", err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		t.Fatalf("go-diskfs reading our table: %v", err)
	}
	parts := pt.(*dgpt.Table).Partitions
	var found bool
	for _, dp := range parts {
		if dp.Start == p.FirstLBA && dp.End == p.LastLBA && dp.Name == "Cairn data" &&
			uuid.MustParse(string(dp.Type)) == TypeCairnData {
			found = true
		}
	}
	if !found {
		t.Errorf("go-diskfs does not see the data partition in %+v", parts)
	}
}

func TestGrownDisk(t *testing.T) {
	path := builderImage(t, imageSize)
	if err := os.Truncate(path, 4*imageSize); err != nil {
		t.Fatal(err)
	}
	f, size := openImage(t, path)
	p, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
	if err != nil {
		t.Fatalf("EnsurePartition: %v", err)
	}
	total := uint64(size / 512)
	if p.LastLBA != total-34 {
		t.Errorf("data partition ends at %d, want %d: all of the grown disk", p.LastLBA, total-34)
	}
	checkBothValid(t, f, size)
	old := make([]byte, 512)
	f.ReadAt(old, imageSize-512)
	if !bytes.Equal(old, make([]byte, 512)) {
		t.Errorf("old backup header at the image's end was left in place")
	}
	mbr := make([]byte, 512)
	f.ReadAt(mbr, 0)
	if got := uint64(mbr[458]) | uint64(mbr[459])<<8 | uint64(mbr[460])<<16 | uint64(mbr[461])<<24; got != total-1 || mbr[450] != 0xee {
		t.Errorf("protective MBR covers %d sectors (type %#x), want %d (0xee)", got, mbr[450], total-1)
	}
}

func fileHash(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestIdempotent(t *testing.T) {
	path := builderImage(t, imageSize)
	f, size := openImage(t, path)
	first, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
	if err != nil {
		t.Fatalf("EnsurePartition: %v", err)
	}
	before := fileHash(t, path)
	again, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
	if err != nil {
		t.Fatalf("second EnsurePartition: %v", err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second EnsurePartition returned another partition (-first +second):\n%s", diff)
	}
	if fileHash(t, path) != before {
		t.Errorf("second EnsurePartition changed the disk")
	}
}

func TestCorruptPrimaryRecovered(t *testing.T) {
	for _, what := range []struct {
		name string
		off  int64
	}{{"header", 512 + 40}, {"entries", 1024 + 130}} {
		t.Run(what.name, func(t *testing.T) {
			path := builderImage(t, imageSize)
			f, size := openImage(t, path)
			want, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
			if err != nil {
				t.Fatalf("EnsurePartition: %v", err)
			}
			f.WriteAt([]byte{0xde, 0xad}, what.off)
			tab, err := Read(f, size, 512)
			if err != nil {
				t.Fatalf("Read with a corrupt primary %s: %v", what.name, err)
			}
			if !tab.Recovered() {
				t.Errorf("Read with a corrupt primary %s: Recovered() = false", what.name)
			}
			got, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
			if err != nil {
				t.Fatalf("EnsurePartition after corruption: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("partition after recovery differs (-want +got):\n%s", diff)
			}
			checkBothValid(t, f, size)
		})
	}
}

func TestBothDamaged(t *testing.T) {
	path := builderImage(t, imageSize)
	f, size := openImage(t, path)
	f.WriteAt([]byte("garbage!"), 512)
	f.WriteAt([]byte("garbage!"), size-512)
	if _, err := Read(f, size, 512); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read(both headers damaged) = %v, want ErrInvalid", err)
	}
	if _, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048); err == nil {
		t.Errorf("EnsurePartition(both headers damaged) succeeded, want an error")
	}
}

func TestNoSpace(t *testing.T) {
	path := builderImage(t, 18*mib)
	f, size := openImage(t, path)
	if _, _, err := EnsurePartition(f, size, 512, dataTemplate, 64*mib/512); !errors.Is(err, ErrNoSpace) {
		t.Errorf("EnsurePartition(no room) = %v, want ErrNoSpace", err)
	}
}

func TestFreeSpans(t *testing.T) {
	tab := &Table{SectorSize: 512, FirstUsableLBA: 34, LastUsableLBA: 9999, Entries: make([]Partition, 4)}
	tab.Entries[0] = Partition{Type: TypeEFISystem, FirstLBA: 2048, LastLBA: 4095}
	tab.Entries[2] = Partition{Type: TypeCairnData, FirstLBA: 6000, LastLBA: 6999}
	got := tab.FreeSpans()
	want := []Span{{34, 2047}, {4096, 5999}, {7000, 9999}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FreeSpans differs (-want +got):\n%s", diff)
	}
	tab.Entries[2] = Partition{}
	i, err := tab.Add(Partition{Type: TypeCairnData}, 1)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	// The span before the ESP is larger than nothing but lies before it.
	if p := tab.Entries[i]; p.FirstLBA != 4096 || p.LastLBA != 9999 {
		t.Errorf("Add placed the partition at %d..%d, want 4096..9999", p.FirstLBA, p.LastLBA)
	}
}

// TestGrownDiskAfterSystemSlots adds the data partition to an image laid
// out as Cairn's is now, ESP and two system slots, written to a larger
// disk: it goes after the second slot and takes the rest of the disk,
// and the slots stay as they were.
func TestGrownDiskAfterSystemSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	d, err := diskfs.Create(path, imageSize, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatalf("creating image: %v", err)
	}
	const slot = 8 * mib / 512
	systemType := func(u uuid.UUID) dgpt.Type { return dgpt.Type(u.String()) }
	err = d.Partition(&dgpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		Partitions: []*dgpt.Partition{
			{Index: 1, Start: 2048, End: espEnd, Type: dgpt.EFISystemPartition, Name: "EFI System Partition"},
			{Index: 2, Start: espEnd + 1, End: espEnd + slot, Type: systemType(TypeCairnSystemA), Name: "system-a"},
			{Index: 3, Start: espEnd + slot + 1, End: espEnd + 2*slot, Type: systemType(TypeCairnSystemB), Name: "system-b"},
		},
	})
	if err != nil {
		t.Fatalf("partitioning image: %v", err)
	}
	d.Close()
	if err := os.Truncate(path, 16*imageSize); err != nil {
		t.Fatal(err)
	}
	f, size := openImage(t, path)
	before, err := Read(f, size, 512)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	p, i, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
	if err != nil {
		t.Fatalf("EnsurePartition: %v", err)
	}
	total := uint64(size / 512)
	if p.FirstLBA != espEnd+2*slot+1 || p.LastLBA != total-34 || i != 3 {
		t.Errorf("data partition %d at %d..%d, want 3 at %d..%d", i, p.FirstLBA, p.LastLBA, espEnd+2*slot+1, total-34)
	}
	after := checkBothValid(t, f, size)
	if diff := cmp.Diff(before.Entries[:3], after.Entries[:3]); diff != "" {
		t.Errorf("ESP and system slots changed (-before +after):\n%s", diff)
	}
	for j, typ := range []uuid.UUID{TypeEFISystem, TypeCairnSystemA, TypeCairnSystemB} {
		if after.Find(typ) != j {
			t.Errorf("Find(%v) = %d, want %d", typ, after.Find(typ), j)
		}
	}
}
