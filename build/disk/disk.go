// Package disk writes Cairn's bootable disk image: a GPT disk holding a
// FAT32 EFI system partition with the unified kernel image at the
// firmware's removable-media path, then the two slots of the system
// partition, system-a with the verified system image (build/system) and
// system-b empty, reserved for A/B updates. The rest of the disk is left
// free: a node creates its encrypted data partition there on first boot,
// after the slots, growing the GPT to the whole disk it was written to.
//
//	0      1 MiB          257 MiB           1281 MiB          2305 MiB     3 GiB
//	├─ GPT ┼─ ESP ─────────┼─ system-a ──────┼─ system-b ──────┼─ free ─────┼─ backup
//	│      │ FAT32, 256 MiB│ 1 GiB           │ 1 GiB           │ data       │  GPT
//	│      │ BOOTX64.EFI   │ EROFS ‖ verity  │ empty, same     │ partition, │
//	│      │ cairn/        │ hash tree       │ size            │ first boot │
//
// The ESP is made by Debian's reference FAT tools (mkfs.fat from
// dosfstools, mmd and mcopy from mtools), which fsck.fat and every UEFI
// firmware agree with; the GPT around it is written in Go. The image file
// is sparse: the free space, system-b, the unused end of system-a and the
// ESP's unused clusters take no room on the build machine.
package disk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

	cairngpt "cairn.dev/cairn/pkg/gpt"
)

const (
	// MiB is a mebibyte; every size and offset here is a whole number of
	// them, which keeps partitions aligned for any sector size.
	MiB = 1 << 20
	// DefaultSize is the default size of the whole image: the ESP, both
	// system slots and 767 MiB free, room for a small data partition
	// when the image is booted as it is. Machines' disks are larger;
	// the node grows into them.
	DefaultSize = 3072 * MiB
	// DefaultESPSize is the default size of the EFI system partition:
	// room for several unified kernel images (A/B updates later) and
	// FAT32's minimum cluster count with 512-byte clusters.
	DefaultESPSize = 256 * MiB
	// ESPStart is where the ESP begins, after the primary GPT.
	ESPStart = 1 * MiB
	// DefaultSystemSize is the default size of each system slot: 1 GiB.
	// The system image carries the Kubernetes payload (build/kubernetes:
	// Kubernetes, containerd, runc, CNI plugins): 180 MiB of static
	// programs, 85 MiB in lz4hc-compressed EROFS, measured with
	// Kubernetes v1.37.2. Its hash tree adds 0.8 %. 1 GiB holds even the
	// uncompressed payload five times over, and keeps both slots within
	// 2 GiB of a disk.
	DefaultSystemSize = 1024 * MiB
	// BootPath is where UEFI firmware looks for a removable disk's boot
	// loader on x86-64.
	BootPath = "/EFI/BOOT/BOOTX64.EFI"
	// ESPLabel is the FAT volume label of the ESP.
	ESPLabel = "CAIRN-ESP"
	// ESPName is the GPT partition name of the ESP.
	ESPName = "EFI System Partition"
	// SystemAName and SystemBName are the GPT partition names of the
	// system slots; the type GUIDs (gpt.TypeCairnSystemA and B) are what
	// the node looks for.
	SystemAName = "system-a"
	SystemBName = "system-b"
	sectorSize  = 512
)

// Config says what goes on the image.
type Config struct {
	// Size is the size of the image file in bytes, a multiple of MiB.
	Size int64
	// ESPSize is the size of the EFI system partition, a multiple of MiB.
	ESPSize int64
	// SystemSize is the size of each of the two system slots, a
	// multiple of MiB.
	SystemSize int64
	// System is the file to copy into system-a: the system image with
	// its hash tree. Empty leaves both slots empty.
	System string
	// Files maps paths on the ESP ("/EFI/BOOT/BOOTX64.EFI") to the files
	// on this machine to copy there. Parent directories are created.
	Files map[string]string
	// Dirs are directories to create on the ESP even when empty
	// ("/cairn").
	Dirs []string
}

// Write creates the image at path, replacing any file there.
func Write(path string, c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("when removing the old image: %w", err)
	}
	esp := path + ".esp"
	defer os.Remove(esp)
	err := makeESP(esp, c)
	if err == nil {
		err = writeGPT(path, c)
	}
	if err == nil {
		err = copySparse(path, ESPStart, esp)
	}
	if err == nil && c.System != "" {
		err = copySparse(path, c.Partitions()[1].Start, c.System)
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// A Partition is one partition of the image as Write lays it out.
type Partition struct {
	// Name is the GPT partition name.
	Name string
	// Type is the partition type GUID.
	Type uuid.UUID
	// Start and Size are in bytes.
	Start, Size int64
}

// Partitions returns the image's partitions in disk order: the ESP,
// system-a and system-b.
func (c Config) Partitions() []Partition {
	a := ESPStart + c.ESPSize
	return []Partition{
		{ESPName, cairngpt.TypeEFISystem, ESPStart, c.ESPSize},
		{SystemAName, cairngpt.TypeCairnSystemA, a, c.SystemSize},
		{SystemBName, cairngpt.TypeCairnSystemB, a + c.SystemSize, c.SystemSize},
	}
}

// Free returns the bytes after the last partition that the data partition
// can take on a disk of the image's size: all but the backup GPT's MiB.
func (c Config) Free() int64 {
	p := c.Partitions()
	return c.Size - MiB - (p[len(p)-1].Start + p[len(p)-1].Size)
}

func (c Config) check() error {
	switch {
	case c.Size%MiB != 0 || c.ESPSize%MiB != 0 || c.SystemSize%MiB != 0:
		return fmt.Errorf("image size %d, ESP size %d and system size %d must be whole MiB", c.Size, c.ESPSize, c.SystemSize)
	case c.ESPSize < 64*MiB:
		// Below ~33 MiB FAT32 cannot have enough clusters; keep a margin.
		return fmt.Errorf("ESP size %d MiB is below the 64 MiB minimum", c.ESPSize/MiB)
	case c.SystemSize < MiB:
		return fmt.Errorf("system slots of %d bytes are too small", c.SystemSize)
	case c.Free() < 0:
		return fmt.Errorf("ESP of %d MiB and two system slots of %d MiB do not fit an image of %d MiB",
			c.ESPSize/MiB, c.SystemSize/MiB, c.Size/MiB)
	}
	if c.System != "" {
		st, err := os.Stat(c.System)
		if err != nil {
			return fmt.Errorf("when looking at the system image: %w", err)
		}
		if st.Size() > c.SystemSize {
			return fmt.Errorf("system image of %d MiB does not fit a slot of %d MiB", (st.Size()+MiB-1)/MiB, c.SystemSize/MiB)
		}
	}
	return nil
}

// makeESP formats a FAT32 filesystem in the file esp and fills it.
func makeESP(esp string, c Config) error {
	os.Remove(esp)
	// --invariant: no random volume ID, no build time in the boot sector.
	if err := run("mkfs.fat", "-F", "32", "-n", ESPLabel, "--invariant", "-C", esp,
		strconv.FormatInt(c.ESPSize/1024, 10)); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, d := range c.Dirs {
		dirs[path.Clean(d)] = true
	}
	for name := range c.Files {
		dirs[path.Dir(name)] = true
	}
	// Sorted, every parent before its children; mmd creates one level.
	all := map[string]bool{}
	for d := range dirs {
		for ; d != "/" && d != "."; d = path.Dir(d) {
			all[d] = true
		}
	}
	if len(all) > 0 {
		args := []string{"-i", esp}
		for _, d := range slices.Sorted(maps.Keys(all)) {
			args = append(args, "::"+d)
		}
		if err := run("mmd", args...); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Files)) {
		if err := run("mcopy", "-i", esp, c.Files[name], "::"+name); err != nil {
			return err
		}
	}
	return nil
}

// writeGPT creates the sparse image file with a protective MBR, the
// primary GPT and the backup GPT in the last sectors, listing the ESP and
// the system slots.
func writeGPT(path string, c Config) error {
	d, err := diskfs.Create(path, c.Size, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("when creating the image: %w", err)
	}
	table := &gpt.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		ProtectiveMBR:      true,
	}
	for i, p := range c.Partitions() {
		table.Partitions = append(table.Partitions, &gpt.Partition{
			Index: i + 1,
			Start: uint64(p.Start / sectorSize),
			End:   uint64((p.Start+p.Size)/sectorSize - 1),
			Type:  gpt.Type(strings.ToUpper(p.Type.String())),
			Name:  p.Name,
		})
	}
	err = d.Partition(table)
	if cerr := d.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("when writing the partition table: %w", err)
	}
	return nil
}

// copySparse copies the file src into dst at offset, skipping blocks of
// zeros so the image stays sparse.
func copySparse(dst string, offset int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("when opening %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("when opening the image: %w", err)
	}
	buf := make([]byte, 64*1024)
	zero := make([]byte, len(buf))
	for pos := offset; ; {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := out.WriteAt(buf[:n], pos); err != nil {
				out.Close()
				return fmt.Errorf("when writing %s into the image: %w", src, err)
			}
		}
		pos += int64(n)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			out.Close()
			return fmt.Errorf("when reading %s: %w", src, rerr)
		}
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("when closing the image: %w", err)
	}
	return nil
}

// run runs one of the FAT tools, returning its output in the error.
func run(tool string, args ...string) error {
	cmd := exec.Command(tool, args...)
	// mtools checks the geometry of "disks" it knows nothing about; an
	// image file has none to check.
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("when running %s: %w: %s", tool, err, bytes.TrimSpace(out))
	}
	return nil
}
