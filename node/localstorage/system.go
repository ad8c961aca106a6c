package localstorage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/verity"
)

// Slot names one of the system partition's two slots.
type Slot string

// The system partition's slots. A node boots the one its command line
// names; the other waits for an update.
const (
	SlotA Slot = "a"
	SlotB Slot = "b"
)

// ParseSlot reads a slot's name, as the command line gives it.
func ParseSlot(s string) (Slot, error) {
	switch Slot(s) {
	case SlotA, SlotB:
		return Slot(s), nil
	}
	return "", fmt.Errorf("system slot %q is neither %q nor %q", s, SlotA, SlotB)
}

// partitionType is the GPT type of the slot's partition.
func (s Slot) partitionType() uuid.UUID {
	if s == SlotB {
		return gpt.TypeCairnSystemB
	}
	return gpt.TypeCairnSystemA
}

const (
	// systemMapping is the name of the system partition's verity device.
	systemMapping = "system"
	// headBlocks is how much of the verified device MountSystem reads
	// before mounting: the EROFS superblock is in the first block, the
	// root directory's metadata close behind.
	headBlocks = 16
)

// ErrSystemCorrupt says a slot's content does not match the root hash it
// was to be checked against: the slot is not used. It does not go away
// by trying again.
var ErrSystemCorrupt = errors.New("system partition does not match its root hash")

// SystemMount says how MountSystem went.
type SystemMount struct {
	// Partition is the slot's block device.
	Partition string
	// Verity is how long finding the slot, setting up its verity device
	// and checking its first blocks took.
	Verity time.Duration
	// Mount is how long mounting it took.
	Mount time.Duration
}

// MountSystem maps the system partition's slot through dm-verity with p
// and mounts the verified device read-only at Root.System. Before it
// mounts, it reads the first blocks, which the filesystem reads at every
// mount: a slot whose content does not match p gives an error wrapping
// ErrSystemCorrupt and is left unmapped. Later reads of a block that does
// not match fail with EIO; no unverified byte is ever returned.
func (s *Storage) MountSystem(slot Slot, p verity.Params) (SystemMount, error) {
	if err := p.Check(); err != nil {
		return SystemMount{}, fmt.Errorf("when checking the verity parameters of slot %s: %w", slot, err)
	}
	start := time.Now()
	part, size, err := s.block.systemPartition(slot)
	if err != nil {
		return SystemMount{}, fmt.Errorf("when looking for system slot %s: %w", slot, err)
	}
	m := SystemMount{Partition: part}
	if size < p.End() {
		return m, fmt.Errorf("%w: slot %s holds %d bytes, and its image with the hash tree needs %d",
			ErrSystemCorrupt, slot, size, p.End())
	}
	mapped, err := s.block.openVerity(systemMapping, part, p)
	if err != nil {
		return m, fmt.Errorf("when setting up verity on system slot %s: %w", slot, err)
	}
	if err := readHead(mapped, min(headBlocks, p.DataBlocks)*verity.BlockSize); err != nil {
		return m, s.systemFailed(slot, err)
	}
	m.Verity = time.Since(start)
	target := s.Root.System.FullPath()
	if err := os.MkdirAll(target, 0o755); err != nil {
		s.block.closeVerity(systemMapping)
		return m, fmt.Errorf("when creating %s: %w", target, err)
	}
	mounted := time.Now()
	// Read-only is all EROFS and verity allow; the binaries on it run.
	if err := s.block.mount(mapped, target, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return m, s.systemFailed(slot, fmt.Errorf("when mounting %s: %w", target, err))
	}
	m.Mount = time.Since(mounted)
	return m, nil
}

// systemFailed removes the verity device after err and says whether it
// had found a block that does not match.
func (s *Storage) systemFailed(slot Slot, err error) error {
	corrupt, serr := s.block.verityCorrupt(systemMapping)
	if cerr := s.block.closeVerity(systemMapping); cerr != nil {
		err = errors.Join(err, fmt.Errorf("when removing the verity device: %w", cerr))
	}
	if serr == nil && corrupt {
		return fmt.Errorf("%w: slot %s: %w", ErrSystemCorrupt, slot, err)
	}
	return fmt.Errorf("when reading system slot %s: %w", slot, err)
}

// readHead reads the first n bytes of device.
func readHead(device string, n uint64) error {
	f, err := os.Open(device)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.ReadFull(f, make([]byte, n)); err != nil {
		return fmt.Errorf("when reading the first %d bytes of %s: %w", n, device, err)
	}
	return nil
}
