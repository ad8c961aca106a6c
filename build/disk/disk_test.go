package disk

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

	cairngpt "cairn.dev/cairn/pkg/gpt"
)

// sampleSystem is what writeSample puts into system-a: not a whole
// number of sectors, with zeros the sparse copy skips.
var sampleSystem = append(append(bytes.Repeat([]byte("system"), 100_000), make([]byte, 300_000)...), "tail"...)

func writeSample(t *testing.T) (string, []byte) {
	t.Helper()
	for _, tool := range []string{"mkfs.fat", "fsck.fat", "mmd", "mcopy", "mdir"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (dosfstools, mtools; build/deps.sh installs them): the ESP cannot be made", tool)
		}
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "cairn.img")
	// Not a multiple of the cluster size, with zero blocks the sparse copy
	// skips, to catch truncation.
	boot := bytes.Repeat([]byte("0123456789abcdef"), 300_001)
	boot = append(boot, make([]byte, 200_000)...)
	boot = append(boot, "end"...)
	bootFile, noteFile := filepath.Join(dir, "boot.efi"), filepath.Join(dir, "note.txt")
	if err := os.WriteFile(bootFile, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noteFile, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	systemFile := filepath.Join(dir, "system.img")
	if err := os.WriteFile(systemFile, sampleSystem, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(img, sampleConfig(bootFile, noteFile, systemFile))
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return img, boot
}

func sampleConfig(bootFile, noteFile, systemFile string) Config {
	return Config{
		Size:       DefaultSize,
		ESPSize:    DefaultESPSize,
		SystemSize: DefaultSystemSize,
		System:     systemFile,
		Files:      map[string]string{BootPath: bootFile, "/cairn/note.txt": noteFile},
		Dirs:       []string{"/cairn", "/empty"},
	}
}

func TestWriteLayout(t *testing.T) {
	img, boot := writeSample(t)
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != DefaultSize {
		t.Errorf("image size = %d, want %d", st.Size(), DefaultSize)
	}

	d, err := diskfs.Open(img, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatalf("opening the image: %v", err)
	}
	defer d.Close()
	table, err := d.GetPartitionTable()
	if err != nil {
		t.Fatalf("reading the partition table: %v", err)
	}
	g, ok := table.(*gpt.Table)
	if !ok {
		t.Fatalf("partition table is %T, want GPT", table)
	}
	if len(g.Partitions) < 3 {
		t.Fatalf("%d partitions, want the ESP and two system slots", len(g.Partitions))
	}
	if g.Partitions[0].Type != gpt.EFISystemPartition {
		t.Errorf("partition 1 type = %s, want the EFI system partition type", g.Partitions[0].Type)
	}
	// The layout of the package documentation, in bytes.
	for i, want := range []struct {
		name       string
		typ        uuid.UUID
		start, end int64
	}{
		{ESPName, cairngpt.TypeEFISystem, 1 * MiB, 257 * MiB},
		{"system-a", cairngpt.TypeCairnSystemA, 257 * MiB, 1281 * MiB},
		{"system-b", cairngpt.TypeCairnSystemB, 1281 * MiB, 2305 * MiB},
	} {
		p := g.Partitions[i]
		if got := uuid.MustParse(string(p.Type)); got != want.typ || p.Name != want.name {
			t.Errorf("partition %d is %q of type %s, want %q of type %s", i+1, p.Name, got, want.name, want.typ)
		}
		if start, end := int64(p.Start)*sectorSize, int64(p.End+1)*sectorSize; start != want.start || end != want.end {
			t.Errorf("%s spans bytes %d to %d, want %d to %d", want.name, start, end, want.start, want.end)
		}
	}
	for _, p := range g.Partitions[3:] {
		if p.Type != gpt.Unused {
			t.Errorf("unexpected partition %+v: the data partition is the node's to create", p)
		}
	}
	// system-a holds the system image, system-b nothing.
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	slot := make([]byte, len(sampleSystem)+4096)
	if _, err := f.ReadAt(slot, 257*MiB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(slot[:len(sampleSystem)], sampleSystem) || !bytes.Equal(slot[len(sampleSystem):], make([]byte, 4096)) {
		t.Errorf("system-a does not start with the system image followed by zeros")
	}
	if _, err := f.ReadAt(slot, 1281*MiB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(slot, make([]byte, len(slot))) {
		t.Errorf("system-b is not empty")
	}

	fs, err := d.GetFilesystem(1)
	if err != nil {
		t.Fatalf("opening the ESP: %v", err)
	}
	got, err := fs.ReadFile(BootPath)
	if err != nil {
		t.Fatalf("reading %s: %v", BootPath, err)
	}
	if !bytes.Equal(got, boot) {
		t.Errorf("%s holds %d bytes, not the %d written", BootPath, len(got), len(boot))
	}
	for _, dir := range []string{"cairn", "empty", "EFI/BOOT"} { // io/fs paths
		if _, err := fs.ReadDir(dir); err != nil {
			t.Errorf("ReadDir(%s): %v", dir, err)
		}
	}
	if got, err := fs.ReadFile("/cairn/note.txt"); err != nil || string(got) != "hello" {
		t.Errorf("ReadFile(/cairn/note.txt) = %q, %v; want %q", got, err, "hello")
	}
}

// TestWriteBackupGPT checks the GPT headers by hand: the primary at LBA 1
// and the backup in the very last sector, each pointing at the other.
func TestWriteBackupGPT(t *testing.T) {
	img, _ := writeSample(t)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func(off int64) []byte {
		b := make([]byte, sectorSize)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return b
	}
	mbr := read(0)
	if mbr[510] != 0x55 || mbr[511] != 0xaa || mbr[446+4] != 0xee {
		t.Errorf("sector 0 is not a protective MBR (signature %x, type %#x)", mbr[510:512], mbr[446+4])
	}
	lastLBA := uint64(DefaultSize/sectorSize - 1)
	primary, backup := read(sectorSize), read(int64(lastLBA)*sectorSize)
	for name, h := range map[string][]byte{"primary": primary, "backup": backup} {
		if string(h[:8]) != "EFI PART" {
			t.Fatalf("%s GPT header signature = %q, want %q", name, h[:8], "EFI PART")
		}
	}
	le := binary.LittleEndian
	if got := le.Uint64(primary[32:]); got != lastLBA {
		t.Errorf("primary header's backup LBA = %d, want %d", got, lastLBA)
	}
	if got := le.Uint64(backup[24:]); got != lastLBA {
		t.Errorf("backup header's own LBA = %d, want %d", got, lastLBA)
	}
	// Everything after the ESP up to the backup table is free.
	if got := le.Uint64(primary[48:]); got < lastLBA-40 {
		t.Errorf("last usable LBA = %d, want near %d", got, lastLBA)
	}
}

// TestWriteWithDosfstools checks the ESP with fsck.fat and mdir.
func TestWriteWithDosfstools(t *testing.T) {
	img, _ := writeSample(t)
	// Cut the ESP out of the image for fsck.fat.
	esp := filepath.Join(t.TempDir(), "esp.img")
	src, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(esp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, io.NewSectionReader(src, ESPStart, DefaultESPSize)); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	out, err := exec.Command("fsck.fat", "-n", esp).CombinedOutput()
	if err != nil {
		t.Errorf("fsck.fat -n: %v\n%s", err, out)
	}
	out, err = exec.Command("mdir", "-i", esp, "-b", "-/", "::/").CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v\n%s", err, out)
	}
	for _, want := range []string{"::/EFI/BOOT/BOOTX64.EFI", "::/cairn/"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("mdir -/ lists\n%s\nwithout %s", out, want)
		}
	}
}

// TestDataPartitionAfterSlots writes the image to a larger disk, as the
// launcher and a real machine do, and adds the data partition the way a
// node does on first boot: it must land after system-b and take the rest
// of the disk.
func TestDataPartitionAfterSlots(t *testing.T) {
	img, _ := writeSample(t)
	const disk = 16 << 30
	if err := os.Truncate(img, disk); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, _, err := cairngpt.EnsurePartition(f, disk, sectorSize,
		cairngpt.Partition{Type: cairngpt.TypeCairnData, Name: "Cairn data"}, 256*MiB/sectorSize)
	if err != nil {
		t.Fatalf("EnsurePartition on the grown image: %v", err)
	}
	if got, want := int64(p.FirstLBA)*sectorSize, int64(2305*MiB); got != want {
		t.Errorf("data partition starts at byte %d, want %d, right after system-b", got, want)
	}
	if got, want := int64(p.LastLBA+1)*sectorSize, int64(disk-MiB); got < want {
		t.Errorf("data partition ends at byte %d, want the disk's end (%d) less the backup GPT", got, want)
	}
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.img") // 2 MiB of zeros, for 1 MiB slots
	if err := os.WriteFile(big, make([]byte, 2*MiB), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"ESP larger than disk":   {Size: 128 * MiB, ESPSize: 256 * MiB, SystemSize: MiB},
		"ESP too small":          {Size: DefaultSize, ESPSize: 16 * MiB, SystemSize: DefaultSystemSize},
		"partial MiB":            {Size: DefaultSize + 1, ESPSize: DefaultESPSize, SystemSize: DefaultSystemSize},
		"slots larger than disk": {Size: 1024 * MiB, ESPSize: DefaultESPSize, SystemSize: 512 * MiB},
		"no slots":               {Size: DefaultSize, ESPSize: DefaultESPSize},
		"system image too big":   {Size: DefaultSize, ESPSize: DefaultESPSize, SystemSize: MiB, System: big},
		"system image missing":   {Size: DefaultSize, ESPSize: DefaultESPSize, SystemSize: MiB, System: filepath.Join(dir, "none")},
	} {
		path := filepath.Join(dir, "x.img")
		if err := Write(path, c); err == nil {
			t.Errorf("Write(%s) succeeded, want an error", name)
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("Write(%s) left an image behind", name)
		}
	}
}
