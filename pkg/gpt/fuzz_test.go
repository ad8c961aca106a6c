package gpt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead feeds arbitrary disks to Read: it must not panic, and what it
// accepts must describe partitions inside the disk.
func FuzzRead(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.img")
	if err := os.WriteFile(path, make([]byte, 256*512), 0o600); err != nil {
		f.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		f.Fatal(err)
	}
	tab := &Table{SectorSize: 512, FirstUsableLBA: 34, LastUsableLBA: 256 - 34, Entries: make([]Partition, 128)}
	tab.Entries[0] = Partition{Type: TypeEFISystem, FirstLBA: 40, LastLBA: 99, Name: "ESP"}
	if err := Write(file, 256*512, tab); err != nil {
		f.Fatal(err)
	}
	file.Close()
	small, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add(small[:len(small)/2])
	f.Add(make([]byte, 8192))
	f.Fuzz(func(t *testing.T, disk []byte) {
		size := int64(len(disk)) / 512 * 512
		tab, err := Read(bytes.NewReader(disk), size, 512)
		if err != nil {
			return
		}
		total := uint64(size / 512)
		for i, p := range tab.Entries {
			if p.Type.String() != "00000000-0000-0000-0000-000000000000" && (p.LastLBA >= total || p.FirstLBA > p.LastLBA) {
				t.Errorf("entry %d at %d..%d on a disk of %d sectors", i, p.FirstLBA, p.LastLBA, total)
			}
		}
	})
}
