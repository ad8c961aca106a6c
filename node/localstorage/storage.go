package localstorage

import (
	"context"
	"fmt"
	"path/filepath"

	"cairn.dev/cairn/node/localstorage/declarative"
	"cairn.dev/cairn/pkg/verity"
)

// Config says where the node's storage lives. Every path has a node
// default, so that tests can run the same code under temporary
// directories.
type Config struct {
	// Root is where the tree is placed; "/" when empty.
	Root string
	// SysBlock is the sysfs block class directory; "/sys/class/block"
	// when empty.
	SysBlock string
	// Dev is the devtmpfs directory holding block device nodes; "/dev"
	// when empty.
	Dev string
	// EFIVars is the efivarfs mount point; "/sys/firmware/efi/efivars"
	// when empty.
	EFIVars string
	// MkfsXFS is the mkfs.xfs binary. Empty means usr/sbin/mkfs.xfs
	// below Root.System, where the system image carries it: MountNew
	// then works only once MountSystem has mounted it.
	MkfsXFS string
}

func (c *Config) defaults() {
	set := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	set(&c.Root, "/")
	set(&c.SysBlock, "/sys/class/block")
	set(&c.Dev, "/dev")
	set(&c.EFIVars, "/sys/firmware/efi/efivars")
}

// mkfsXFSPath is where the system image (build/system) carries Debian's
// mkfs.xfs, below its mount point: at its own path.
const mkfsXFSPath = "usr/sbin/mkfs.xfs"

// blockLayer is everything the system and data partition logic does to
// the kernel. The real one (block_linux.go) drives GPT, device-mapper,
// mkfs.xfs and mount(2); tests substitute one working on files.
type blockLayer interface {
	// systemPartition returns the device of the boot disk's partition
	// for slot and its size in bytes.
	systemPartition(slot Slot) (device string, size uint64, err error)
	// openVerity maps device as the dm-verity device name checked
	// against p, replacing a device of that name left from an earlier
	// attempt, and returns the mapped device.
	openVerity(name, device string, p verity.Params) (string, error)
	// verityCorrupt reports whether the verity device name has read a
	// block that does not match its hash.
	verityCorrupt(name string) (bool, error)
	// closeVerity removes the verity device name.
	closeVerity(name string) error
	// dataPartition returns the device of the data partition and its
	// size in 512-byte sectors. With create set it first makes sure the
	// partition exists; without, a missing one is errNoDataPartition.
	dataPartition(create bool) (device string, sectors uint64, err error)
	// openCrypt maps sectors of device from offset as dm-crypt volume
	// name, replacing a volume of that name left from an earlier
	// attempt, and returns the mapped device.
	openCrypt(name, device string, offset, sectors uint64, key []byte) (string, error)
	// closeCrypt removes the volume name.
	closeCrypt(name string) error
	// mkfs makes an XFS filesystem on device.
	mkfs(ctx context.Context, device string) error
	// mount mounts source at target.
	mount(source, target, fstype string, flags uintptr, data string) error
}

// Storage is a node's storage: the placed tree and the means to mount it.
type Storage struct {
	// Root is the tree, placed at Config.Root.
	Root  *Root
	c     Config
	block blockLayer
}

// New places the tree. It touches no disk.
func New(c Config) (*Storage, error) {
	c.defaults()
	r := &Root{}
	if err := declarative.Place(r, c.Root); err != nil {
		return nil, fmt.Errorf("when placing the storage tree: %w", err)
	}
	if c.MkfsXFS == "" {
		c.MkfsXFS = filepath.Join(r.System.FullPath(), mkfsXFSPath)
	}
	s := &Storage{Root: r, c: c}
	s.block = newKernelBlock(s)
	return s, nil
}

// EFIVars is the efivarfs directory the node reads the firmware's
// variables from.
func (s *Storage) EFIVars() string { return s.c.EFIVars }
