package localstorage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/devicemapper"
	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/verity"
)

// minDataSectors is the smallest data partition worth making, in bytes.
const minDataBytes = 256 << 20

// kernelBlock is the block layer of a real node.
type kernelBlock struct {
	s    *Storage
	boot *bootDisk
}

func newKernelBlock(s *Storage) blockLayer { return &kernelBlock{s: s} }

// disk returns the boot disk, found once.
func (k *kernelBlock) disk() (*bootDisk, error) {
	if k.boot == nil {
		d, err := k.s.findBootDisk()
		if err != nil {
			return nil, fmt.Errorf("when looking for the boot disk: %w", err)
		}
		k.boot = d
	}
	return k.boot, nil
}

// BootDisk returns the kernel name of the disk the node booted from
// ("vda"), found as MountESP finds it.
func (s *Storage) BootDisk() (string, error) {
	kb, ok := s.block.(*kernelBlock)
	if !ok {
		return "", errors.New("the boot disk is known only to the kernel block layer")
	}
	d, err := kb.disk()
	if err != nil {
		return "", err
	}
	return d.name, nil
}

// MountESP finds the boot disk and mounts its ESP at Root.ESP.
func (s *Storage) MountESP() error {
	kb, ok := s.block.(*kernelBlock)
	if !ok {
		return errors.New("ESP mounting needs the kernel block layer")
	}
	d, err := kb.disk()
	if err != nil {
		return err
	}
	dev, err := s.partitionDevice(d.name, d.esp)
	if err != nil {
		return fmt.Errorf("when looking for the ESP: %w", err)
	}
	target := s.Root.ESP.FullPath()
	if err := os.MkdirAll(target, 0o700); err != nil {
		return fmt.Errorf("when creating %s: %w", target, err)
	}
	if err := unix.Mount(dev, target, "vfat", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "umask=0077"); err != nil {
		return fmt.Errorf("when mounting the ESP %s: %w", dev, err)
	}
	return nil
}

// MountEphemeral mounts a tmpfs at Root.Ephemeral.
func (s *Storage) MountEphemeral() error {
	target := s.Root.Ephemeral.FullPath()
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("when creating %s: %w", target, err)
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("when mounting the ephemeral tmpfs: %w", err)
	}
	return nil
}

func (k *kernelBlock) dataPartition(create bool) (string, uint64, error) {
	d, err := k.disk()
	if err != nil {
		return "", 0, err
	}
	f, err := os.OpenFile(d.path, os.O_RDWR, 0)
	if err != nil {
		return "", 0, fmt.Errorf("when opening the boot disk: %w", err)
	}
	defer f.Close()
	size, err := f.Seek(0, 2)
	if err != nil {
		return "", 0, fmt.Errorf("when sizing the boot disk: %w", err)
	}
	var p gpt.Partition
	var i int
	if create {
		tmpl := gpt.Partition{Type: gpt.TypeCairnData, Name: "Cairn data"}
		p, i, err = gpt.EnsurePartition(f, size, d.sectorSize, tmpl, uint64(minDataBytes/d.sectorSize))
		if err != nil {
			return "", 0, err
		}
	} else {
		t, err := gpt.Read(f, size, d.sectorSize)
		if err != nil {
			return "", 0, err
		}
		if i = t.Find(gpt.TypeCairnData); i < 0 {
			return "", 0, errNoDataPartition
		}
		p = t.Entries[i]
	}
	dev, err := k.s.partitionDevice(d.name, i)
	if err != nil && create {
		// The kernel read the table before the partition existed: tell
		// it about the new one alone, as the ESP is in use.
		if err := addPartition(f, i, p, d.sectorSize); err != nil {
			return "", 0, err
		}
		dev, err = k.s.partitionDevice(d.name, i)
	}
	if err != nil {
		return "", 0, err
	}
	return dev, p.Sectors() * uint64(d.sectorSize) / 512, nil
}

// addPartition announces partition index of disk f to the kernel with
// BLKPG, which works while other partitions are mounted.
func addPartition(f *os.File, index int, p gpt.Partition, ss int) error {
	part := unix.BlkpgPartition{
		Start:  int64(p.FirstLBA) * int64(ss),
		Length: int64(p.Sectors()) * int64(ss),
		Pno:    int32(index + 1),
	}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(part)), Data: (*byte)(unsafe.Pointer(&part))}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
		return fmt.Errorf("when adding partition %d to the kernel: %w", index+1, errno)
	}
	return nil
}

func (k *kernelBlock) openCrypt(name, device string, offset, sectors uint64, key []byte) (string, error) {
	return k.openMapping(name, func(c *devicemapper.Control) (uint64, error) {
		return c.CreateCrypt(name, devicemapper.Crypt{Device: device, Offset: offset, Sectors: sectors, Key: key})
	})
}

// openMapping removes the mapped device name if an earlier attempt left
// it, makes it anew with create and returns its device node.
func (k *kernelBlock) openMapping(name string, create func(*devicemapper.Control) (uint64, error)) (string, error) {
	c, err := devicemapper.Open()
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Info(name); err == nil {
		if err := c.Remove(name); err != nil {
			return "", fmt.Errorf("when removing the mapping left from an earlier attempt: %w", err)
		}
	}
	dev, err := create(c)
	if err != nil {
		return "", err
	}
	return filepath.Join(k.s.c.Dev, "dm-"+strconv.FormatUint(uint64(unix.Minor(dev)), 10)), nil
}

func (k *kernelBlock) systemPartition(slot Slot) (string, uint64, error) {
	d, err := k.disk()
	if err != nil {
		return "", 0, err
	}
	t, err := readTable(d)
	if err != nil {
		return "", 0, fmt.Errorf("when reading the boot disk's partition table: %w", err)
	}
	i := t.Find(slot.partitionType())
	if i < 0 {
		return "", 0, fmt.Errorf("the boot disk %s has no partition of type %s", d.name, slot.partitionType())
	}
	dev, err := k.s.partitionDevice(d.name, i)
	if err != nil {
		return "", 0, err
	}
	return dev, t.Entries[i].Sectors() * uint64(d.sectorSize), nil
}

func (k *kernelBlock) openVerity(name, device string, p verity.Params) (string, error) {
	return k.openMapping(name, func(c *devicemapper.Control) (uint64, error) {
		return c.CreateVerity(name, devicemapper.Verity{
			DataDevice: device, HashDevice: device,
			DataBlockSize: verity.BlockSize, HashBlockSize: verity.BlockSize,
			DataBlocks: p.DataBlocks, HashStartBlock: p.HashStartBlock(),
			Algorithm: verity.Algorithm, RootHash: p.RootHash, Salt: p.Salt,
		})
	})
}

func (k *kernelBlock) verityCorrupt(name string) (bool, error) {
	c, err := devicemapper.Open()
	if err != nil {
		return false, err
	}
	defer c.Close()
	st, err := c.VerityState(name)
	return st == devicemapper.VerityCorrupt, err
}

func (k *kernelBlock) closeVerity(name string) error { return k.closeCrypt(name) }

func (k *kernelBlock) closeCrypt(name string) error {
	c, err := devicemapper.Open()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Remove(name)
}

// mkfsArgs are mkfs.xfs's flags: quiet, overwrite whatever signature is
// left (MountNew decided to format), no discard pass over the whole disk
// (slow on large disks and pointless on a fresh dm-crypt volume), and the
// v5 defaults spelled out: metadata CRCs, free inode btree, reflink.
// Project quotas need no mkfs flag on v5 XFS: the prjquota mount option
// creates the quota inodes on first mount.
var mkfsArgs = []string{"-q", "-f", "-K", "-m", "crc=1,finobt=1,reflink=1", "-L", "cairn-data"}

// mkfs runs mkfs.xfs on device. Between starting it and waiting for it,
// it passes the test point mkfs-running: a test image stopped there
// leaves mkfs.xfs writing, so that the power cut that follows lands while
// it runs (or just after it ended).
func (k *kernelBlock) mkfs(ctx context.Context, device string) error {
	cmd := exec.CommandContext(ctx, k.s.c.MkfsXFS, append(mkfsArgs[:len(mkfsArgs):len(mkfsArgs)], device)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("when starting %s: %w", k.s.c.MkfsXFS, err)
	}
	if err := testpoint.Reach(ctx, testpoint.MkfsRunning); err != nil {
		cmd.Wait() // ctx has ended: CommandContext has killed it
		return err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w: %s", k.s.c.MkfsXFS, err, out.Bytes())
	}
	return nil
}

func (k *kernelBlock) mount(source, target, fstype string, flags uintptr, data string) error {
	return unix.Mount(source, target, fstype, flags, data)
}
