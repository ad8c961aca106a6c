package localstorage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/google/uuid"

	"cairn.dev/cairn/pkg/efivar"
	"cairn.dev/cairn/pkg/gpt"
)

// loaderPartUUIDVar is the EFI variable in which the boot loader (systemd's
// stub in Cairn's unified kernel image) names the partition it was loaded
// from, under the boot loader interface's vendor GUID.
const loaderPartUUIDVar = "LoaderDevicePartUUID-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"

// parseLoaderPartUUID decodes an efivarfs file: a 4-byte attribute word,
// then the partition GUID as NUL-terminated UTF-16LE text.
func parseLoaderPartUUID(b []byte) (uuid.UUID, error) {
	if len(b) < 4 || (len(b)-4)%2 != 0 {
		return uuid.Nil, fmt.Errorf("EFI variable of %d bytes is not attributes and UTF-16", len(b))
	}
	units := make([]uint16, 0, (len(b)-4)/2)
	for i := 4; i+1 < len(b); i += 2 {
		u := uint16(b[i]) | uint16(b[i+1])<<8
		if u == 0 {
			break
		}
		units = append(units, u)
	}
	s := strings.TrimSpace(string(utf16.Decode(units)))
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("EFI variable holds %q, not a partition GUID: %w", s, err)
	}
	return id, nil
}

// bootDisk is the disk Cairn booted from.
type bootDisk struct {
	name       string // kernel name, "vda"
	path       string // device node
	sectorSize int
	esp        int // entry index of the ESP
}

// findBootDisk picks the boot disk: the disk holding the partition the
// loader names in LoaderDevicePartUUID, or, without that variable, the
// only disk with an ESP.
func (s *Storage) findBootDisk() (*bootDisk, error) {
	var want uuid.UUID
	b, err := os.ReadFile(filepath.Join(s.c.EFIVars, loaderPartUUIDVar))
	switch {
	case err == nil:
		if want, err = parseLoaderPartUUID(b); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("when reading LoaderDevicePartUUID: %w", err)
	}
	entries, err := os.ReadDir(s.c.SysBlock)
	if err != nil {
		return nil, fmt.Errorf("when listing block devices: %w", err)
	}
	var found []*bootDisk
	for _, e := range entries {
		name := e.Name()
		if _, err := os.Stat(filepath.Join(s.c.SysBlock, name, "partition")); err == nil {
			continue
		}
		if strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "dm-") ||
			strings.HasPrefix(name, "sr") || strings.HasPrefix(name, "zram") {
			continue
		}
		d := &bootDisk{name: name, path: filepath.Join(s.c.Dev, name), sectorSize: sectorSize(s.c.SysBlock, name)}
		t, err := readTable(d)
		if err != nil {
			continue // no GPT, unreadable, or empty (a drive without media)
		}
		for i, p := range t.Entries {
			if (want != uuid.Nil && p.ID == want) || (want == uuid.Nil && p.Type == gpt.TypeEFISystem) {
				d.esp = i
				found = append(found, d)
				break
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && want != uuid.Nil:
		return nil, fmt.Errorf("no disk holds the partition %s the loader booted from", want)
	case len(found) == 0:
		return nil, errors.New("no disk has an EFI system partition")
	}
	var names []string
	for _, d := range found {
		names = append(names, d.name)
	}
	return nil, fmt.Errorf("disks %s all have an ESP, and the loader did not say which one it booted from", strings.Join(names, ", "))
}

func sectorSize(sysBlock, name string) int {
	b, err := os.ReadFile(filepath.Join(sysBlock, name, "queue", "logical_block_size"))
	if err != nil {
		return 512
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || (n != 512 && n != 4096) {
		return 512
	}
	return n
}

func readTable(d *bootDisk) (*gpt.Table, error) {
	f, err := os.Open(d.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		return nil, err
	}
	return gpt.Read(f, size, d.sectorSize)
}

// partitionDevice finds the device node of entry index of disk through
// sysfs, where each partition directory says its number (index + 1).
func (s *Storage) partitionDevice(disk string, index int) (string, error) {
	entries, err := os.ReadDir(filepath.Join(s.c.SysBlock, disk))
	if err != nil {
		return "", fmt.Errorf("when listing partitions of %s: %w", disk, err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(s.c.SysBlock, disk, e.Name(), "partition"))
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(b)) == strconv.Itoa(index+1) {
			return filepath.Join(s.c.Dev, e.Name()), nil
		}
	}
	return "", fmt.Errorf("the kernel knows no partition %d of %s", index+1, disk)
}

// ESPFile is the device path by which the firmware finds file, a path
// from the root of the boot disk's ESP ("EFI/cairn/system-b.efi"), for a
// boot entry (pkg/efivar).
func (s *Storage) ESPFile(file string) (efivar.DevicePath, error) {
	d, err := s.findBootDisk()
	if err != nil {
		return nil, fmt.Errorf("when finding the boot disk: %w", err)
	}
	t, err := readTable(d)
	if err != nil {
		return nil, fmt.Errorf("when reading the partition table of %s: %w", d.path, err)
	}
	return efivar.ESPFile(t, d.esp, file)
}
