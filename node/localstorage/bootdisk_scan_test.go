package localstorage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"cairn.dev/cairn/pkg/gpt"
)

// fakeMachine lays out a sysfs block class and a /dev whose "disks" are
// image files: vda with a GPT and an ESP, vdb blank.
func fakeMachine(t *testing.T) (Config, uuid.UUID) {
	t.Helper()
	dir := t.TempDir()
	c := Config{Root: filepath.Join(dir, "root"), SysBlock: filepath.Join(dir, "sys"),
		Dev: filepath.Join(dir, "dev"), EFIVars: filepath.Join(dir, "efivars")}
	for _, d := range []string{"sys/vda/vda1", "sys/vda1", "sys/vdb", "dev", "efivars"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(c.SysBlock, "vda", "vda1", "partition"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(c.SysBlock, "vda1", "partition"), []byte("1\n"), 0o644)
	espID := uuid.New()
	img := filepath.Join(c.Dev, "vda")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(8 << 20)
	tab := &gpt.Table{DiskID: uuid.New(), SectorSize: 512, FirstUsableLBA: 34, LastUsableLBA: 16384 - 34, Entries: make([]gpt.Partition, 128)}
	tab.Entries[0] = gpt.Partition{Type: gpt.TypeEFISystem, ID: espID, FirstLBA: 2048, LastLBA: 4095}
	if err := gpt.Write(f, 8<<20, tab); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(c.Dev, "vdb"), make([]byte, 1<<20), 0o644)
	return c, espID
}

func TestFindBootDisk(t *testing.T) {
	c, espID := fakeMachine(t)
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.findBootDisk()
	if err != nil {
		t.Fatalf("findBootDisk (only disk with an ESP): %v", err)
	}
	if d.name != "vda" || d.esp != 0 {
		t.Errorf("findBootDisk() = %s, ESP entry %d, want vda, 0", d.name, d.esp)
	}
	dev, err := s.partitionDevice(d.name, d.esp)
	if want := filepath.Join(c.Dev, "vda1"); err != nil || dev != want {
		t.Errorf("partitionDevice(vda, 0) = %q, %v, want %q", dev, err, want)
	}

	varPath := filepath.Join(c.EFIVars, loaderPartUUIDVar)
	os.WriteFile(varPath, efiVar(strings.ToUpper(espID.String())), 0o644)
	if d, err := s.findBootDisk(); err != nil || d.name != "vda" {
		t.Errorf("findBootDisk (by LoaderDevicePartUUID) = %v, %v, want vda", d, err)
	}
	os.WriteFile(varPath, efiVar(uuid.New().String()), 0o644)
	if _, err := s.findBootDisk(); err == nil {
		t.Errorf("findBootDisk (loader names a partition no disk has) succeeded")
	}
}
