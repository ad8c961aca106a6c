package espimage

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"

	builddisk "cairn.dev/cairn/build/disk"
)

const (
	mib      = 1 << 20
	espStart = 1 * mib
	espSize  = 64 * mib
)

// newImage creates a GPT image with one partition of type ptype at 1 MiB,
// formatted FAT32 by go-diskfs when format is set.
func newImage(t testing.TB, ptype gpt.Type, format bool) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	d, err := diskfs.Create(img, 128*mib, diskfs.SectorSizeDefault)
	if err != nil {
		t.Fatalf("diskfs.Create: %v", err)
	}
	defer d.Close()
	table := &gpt.Table{
		LogicalSectorSize:  512,
		PhysicalSectorSize: 512,
		ProtectiveMBR:      true,
		Partitions: []*gpt.Partition{{
			Index: 1,
			Start: espStart / 512,
			End:   (espStart+espSize)/512 - 1,
			Type:  ptype,
			Name:  "test",
		}},
	}
	if err := d.Partition(table); err != nil {
		t.Fatalf("Partition: %v", err)
	}
	if format {
		_, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 1, FSType: filesystem.TypeFat32, VolumeLabel: "TEST"})
		if err != nil {
			t.Fatalf("CreateFilesystem: %v", err)
		}
	}
	return img
}

// writeRead writes and reads back a sequence of contents of one file,
// growing and shrinking it, with a second file beside it that must stay.
func writeRead(t *testing.T, img string) {
	t.Helper()
	if err := WriteFile(img, "cairn/other.pb", []byte("other")); err != nil {
		t.Fatalf("WriteFile(other): %v", err)
	}
	for _, data := range [][]byte{
		[]byte("first"),
		bytes.Repeat([]byte("large file spanning several clusters "), 2000),
		[]byte("small again"),
		{},
	} {
		if err := WriteFile(img, "/cairn/parameters.pb", data); err != nil {
			t.Fatalf("WriteFile(%d bytes): %v", len(data), err)
		}
		got, err := ReadFile(img, "cairn/parameters.pb")
		if err != nil {
			t.Fatalf("ReadFile after writing %d bytes: %v", len(data), err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("ReadFile = %d bytes %.20q, want %d bytes %.20q", len(got), got, len(data), data)
		}
	}
	if got, err := ReadFile(img, "/cairn/other.pb"); err != nil || string(got) != "other" {
		t.Errorf("ReadFile(other) = %q, %v, want %q", got, err, "other")
	}
}

func TestWriteReadGoDiskfsImage(t *testing.T) {
	img := newImage(t, gpt.EFISystemPartition, true)
	writeRead(t, img)
}

// TestWriteReadBuiltImage writes into an image made as the build makes it
// (mkfs.fat and mtools), then checks the result with the same reference
// tools: fsck.fat finds nothing to repair and mtools reads the file.
func TestWriteReadBuiltImage(t *testing.T) {
	for _, tool := range []string{"mkfs.fat", "mmd", "mcopy", "fsck.fat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (dosfstools/mtools) is not installed here; the image builder needs it", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "cairn.img")
	err := builddisk.Write(img, builddisk.Config{
		Size:       128 * mib,
		ESPSize:    espSize,
		SystemSize: 8 * mib,
		Dirs:       []string{"/cairn", "/EFI/BOOT"},
	})
	if err != nil {
		t.Fatalf("disk.Write: %v", err)
	}
	writeRead(t, img)
	want := []byte("parameters for mtools")
	if err := WriteFile(img, "cairn/parameters.pb", want); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}

	cmd := exec.Command("mtype", "-i", img+"@@1M", "::/cairn/parameters.pb")
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.Output(); err != nil || !bytes.Equal(out, want) {
		t.Errorf("mtype = %q, %v, want %q", out, err, want)
	}

	// fsck.fat takes no offset: check a copy of the partition.
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(t.TempDir(), "esp.fat")
	if err := os.WriteFile(part, raw[espStart:espStart+espSize], 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("fsck.fat", "-n", "-v", part).CombinedOutput(); err != nil {
		t.Errorf("fsck.fat -n on the written ESP: %v\n%s", err, out)
	}
}

func TestErrors(t *testing.T) {
	noESP := newImage(t, gpt.LinuxFilesystem, false)
	if err := WriteFile(noESP, "cairn/parameters.pb", []byte("x")); !errors.Is(err, ErrNoESP) {
		t.Errorf("WriteFile on an image without ESP = %v, want ErrNoESP", err)
	}
	if _, err := ReadFile(noESP, "cairn/parameters.pb"); !errors.Is(err, ErrNoESP) {
		t.Errorf("ReadFile on an image without ESP = %v, want ErrNoESP", err)
	}

	blank := filepath.Join(t.TempDir(), "blank.img")
	if err := os.WriteFile(blank, make([]byte, 4*mib), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(blank, "cairn/parameters.pb", []byte("x")); !errors.Is(err, ErrNoGPT) {
		t.Errorf("WriteFile on a blank image = %v, want ErrNoGPT", err)
	}

	unformatted := newImage(t, gpt.EFISystemPartition, false)
	if err := WriteFile(unformatted, "cairn/parameters.pb", []byte("x")); err == nil {
		t.Error("WriteFile on an unformatted ESP succeeded, want an error")
	}

	missing := filepath.Join(t.TempDir(), "missing.img")
	if err := WriteFile(missing, "cairn/parameters.pb", []byte("x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile on a missing image = %v, want os.ErrNotExist", err)
	}

	img := newImage(t, gpt.EFISystemPartition, true)
	if _, err := ReadFile(img, "cairn/parameters.pb"); !errors.Is(err, ErrNotExist) {
		t.Errorf("ReadFile of a missing file = %v, want ErrNotExist", err)
	}
	for _, name := range []string{"", "/", "cairn/"} {
		if err := WriteFile(img, name, []byte("x")); err == nil {
			t.Errorf("WriteFile(%q) succeeded, want an error", name)
		}
	}
}

// TestNewDisk makes a parameters disk and checks it with the reference
// tools: fsck.fat finds nothing to repair, mtools reads the file, and
// NewDisk refuses to overwrite an existing image.
func TestNewDisk(t *testing.T) {
	for _, tool := range []string{"mtype", "fsck.fat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (dosfstools/mtools) is not installed here; the image builder needs it", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "params.img")
	want := []byte("parameters on a stick")
	if err := NewDisk(img, "cairn/parameters.pb", want); err != nil {
		t.Fatalf("NewDisk: %v", err)
	}
	cmd := exec.Command("mtype", "-i", img, "::/cairn/parameters.pb")
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.Output(); err != nil || !bytes.Equal(out, want) {
		t.Errorf("mtype = %q, %v, want %q", out, err, want)
	}
	if out, err := exec.Command("fsck.fat", "-n", "-v", img).CombinedOutput(); err != nil {
		t.Errorf("fsck.fat -n on the new disk: %v\n%s", err, out)
	}
	if err := NewDisk(img, "cairn/parameters.pb", want); !errors.Is(err, os.ErrExist) {
		t.Errorf("NewDisk over an existing image = %v, want os.ErrExist", err)
	}
}
