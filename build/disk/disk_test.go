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
)

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
	err := Write(img, Config{
		Size:    DefaultSize,
		ESPSize: DefaultESPSize,
		Files:   map[string]string{BootPath: bootFile, "/cairn/note.txt": noteFile},
		Dirs:    []string{"/cairn", "/empty"},
	})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return img, boot
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
	if len(g.Partitions) < 1 {
		t.Fatal("no partitions")
	}
	esp := g.Partitions[0]
	if esp.Type != gpt.EFISystemPartition {
		t.Errorf("partition 1 type = %s, want the EFI system partition type", esp.Type)
	}
	if got, want := int64(esp.Start)*sectorSize, int64(ESPStart); got != want {
		t.Errorf("ESP starts at byte %d, want %d", got, want)
	}
	if got, want := int64(esp.End+1)*sectorSize, int64(ESPStart+DefaultESPSize); got != want {
		t.Errorf("ESP ends at byte %d, want %d", got, want)
	}
	for _, p := range g.Partitions[1:] {
		if p.Type != gpt.Unused {
			t.Errorf("unexpected partition %+v: the data partition is the node's to create", p)
		}
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

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]Config{
		"ESP larger than disk": {Size: 128 * MiB, ESPSize: 256 * MiB},
		"ESP too small":        {Size: DefaultSize, ESPSize: 16 * MiB},
		"partial MiB":          {Size: DefaultSize + 1, ESPSize: DefaultESPSize},
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
