package localstorage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/verity"
)

// Slot names one of the system partition's two slots.
type Slot string

// The system partition's slots. A node boots the one whose content
// matches the root hash of its command line; the other waits for an
// update.
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

// Other returns the slot that is not s: the one an update writes while
// s runs.
func (s Slot) Other() Slot {
	if s == SlotA {
		return SlotB
	}
	return SlotA
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

// Errors of the system partition. None of them goes away by trying
// again.
var (
	// ErrSystemCorrupt says a slot's content does not match the root
	// hash it was to be checked against: the slot is not used.
	// MountSystem says it of any slot that does not match;
	// MountMatchingSystem only of a slot whose hash tree's top matches,
	// and so holds the image, damaged.
	ErrSystemCorrupt = errors.New("system partition does not match its root hash")
	// ErrSlotMismatch says a slot does not hold the image of the root
	// hash at all: it is empty, too small, or holds another image (the
	// other release of an A/B pair). MountMatchingSystem passes it over.
	ErrSlotMismatch = errors.New("system slot holds another image or none")
	// ErrNoSystem says no slot holds the image of the root hash:
	// MountMatchingSystem's error names each slot's reason.
	ErrNoSystem = errors.New("no system slot matches the root hash")
)

// BootedSystem is the system slot a node mounted at Root.System: what
// the rest of the node, an installer of updates first, learns of it.
type BootedSystem struct {
	// Slot is the slot mounted; Slot.Other is where an update goes.
	Slot Slot
	// Params are the verity parameters the slot was checked against,
	// from the command line.
	Params verity.Params
	// Partition is the slot's block device.
	Partition string
}

// PassedSlot is a slot MountMatchingSystem tried and did not mount.
type PassedSlot struct {
	Slot Slot
	// Err says why: it wraps ErrSlotMismatch when the slot holds another
	// image or none, ErrSystemCorrupt when it holds the image damaged.
	Err error
}

// SystemMount says how MountSystem or MountMatchingSystem went.
type SystemMount struct {
	BootedSystem
	// Verity is how long finding the slot, setting up its verity device
	// and checking its first blocks took.
	Verity time.Duration
	// Mount is how long mounting it took.
	Mount time.Duration
	// Passed are the slots MountMatchingSystem tried and did not mount,
	// in the order tried, and why; on success, those before Slot.
	Passed []PassedSlot
}

// slots are the system slots in the order MountMatchingSystem tries them.
var slots = []Slot{SlotA, SlotB}

// SystemPartition returns the block device of the boot disk's partition
// for slot and its size in bytes: where an installer writes an image
// into the slot not running.
func (s *Storage) SystemPartition(slot Slot) (device string, size uint64, err error) {
	device, size, err = s.block.systemPartition(slot)
	if err != nil {
		return "", 0, fmt.Errorf("when looking for system slot %s: %w", slot, err)
	}
	return device, size, nil
}

// MountSystem maps the system partition's slot through dm-verity with p
// and mounts the verified device read-only at Root.System. Before it
// maps the slot, it checks the top of the slot's hash tree against the
// root hash; before it mounts, it reads the first blocks, which the
// filesystem reads at every mount. A slot whose content does not match p
// gives an error wrapping ErrSystemCorrupt and is left unmapped. Later
// reads of a block that does not match fail with EIO; no unverified byte
// is ever returned.
func (s *Storage) MountSystem(slot Slot, p verity.Params) (SystemMount, error) {
	if err := p.Check(); err != nil {
		return SystemMount{}, fmt.Errorf("when checking the verity parameters of slot %s: %w", slot, err)
	}
	return s.mountSlot(slot, p, time.Now(), true)
}

// MountMatchingSystem mounts the slot whose content is the image of p,
// as MountSystem does, trying first (when set) and then the other slot,
// else slot a, then slot b: a node finds the slot it booted by content, so
// that one signed kernel image boots from either. first is the slot whose
// unified kernel image the firmware booted, so that when both slots hold
// the same system image (two releases that changed only the kernel
// image), the slot mounted is the one booted. A slot that holds another
// image or none is passed over after one block read and hashed (its hash
// tree's top), with no verity device set up; one whose top matches but
// whose first blocks do not is corrupt, and passed over too. The result's Passed says why each slot
// tried was not mounted. When no slot matches, the error wraps
// ErrNoSystem and names both reasons; when a slot could not be checked at
// all (the disk could not be read), it does not, and trying again may
// help.
func (s *Storage) MountMatchingSystem(p verity.Params, first Slot) (SystemMount, error) {
	if err := p.Check(); err != nil {
		return SystemMount{}, fmt.Errorf("when checking the verity parameters: %w", err)
	}
	start := time.Now()
	var passed []PassedSlot
	lasting := true
	order := slots
	if first == SlotB {
		order = []Slot{SlotB, SlotA}
	}
	for _, slot := range order {
		m, err := s.mountSlot(slot, p, start, false)
		if err == nil {
			m.Passed = passed
			return m, nil
		}
		passed = append(passed, PassedSlot{Slot: slot, Err: err})
		if !errors.Is(err, ErrSlotMismatch) && !errors.Is(err, ErrSystemCorrupt) {
			lasting = false
		}
	}
	reasons := make([]string, len(passed))
	for i, ps := range passed {
		var sm *slotMismatch
		if errors.As(ps.Err, &sm) {
			reasons[i] = fmt.Sprintf("slot %s %v", ps.Slot, sm)
		} else {
			reasons[i] = fmt.Sprintf("slot %s: %v", ps.Slot, ps.Err)
		}
	}
	m := SystemMount{Passed: passed}
	if !lasting {
		return m, fmt.Errorf("when looking for the system slot of root hash %x: %s", p.RootHash, strings.Join(reasons, "; "))
	}
	return m, fmt.Errorf("%w %x: %s", ErrNoSystem, p.RootHash, strings.Join(reasons, "; "))
}

// mountSlot is MountSystem of checked parameters, timed from start. A
// slot whose hash tree's top does not match gives a *slotMismatch, wrapped
// in ErrSystemCorrupt when corrupt is set.
func (s *Storage) mountSlot(slot Slot, p verity.Params, start time.Time, corrupt bool) (SystemMount, error) {
	part, size, err := s.SystemPartition(slot)
	if err != nil {
		return SystemMount{}, err
	}
	m := SystemMount{BootedSystem: BootedSystem{Slot: slot, Params: p, Partition: part}}
	if err := CheckTop(slot, part, size, p); err != nil {
		var sm *slotMismatch
		if corrupt && errors.As(err, &sm) {
			return m, fmt.Errorf("%w: slot %s %w", ErrSystemCorrupt, slot, err)
		}
		return m, err
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

// slotMismatch says why a slot does not hold the image: it is
// ErrSlotMismatch, and its text follows the slot's name.
type slotMismatch struct{ why string }

func (e *slotMismatch) Error() string        { return e.why }
func (e *slotMismatch) Is(target error) bool { return target == ErrSlotMismatch }

// CheckTop reads the one block of the slot's partition part (of size
// bytes) whose digest the root hash is, the top of its hash tree, and
// checks it: reading whole slots of a GiB to choose one would cost a boot
// seconds, and setting a verity device up on a slot of another image
// would have the kernel report corruption that is none. A slot that holds
// another image or none is ErrSlotMismatch; one that passes may still
// hold changed blocks below the top.
func CheckTop(slot Slot, part string, size uint64, p verity.Params) error {
	if size < p.End() {
		return &slotMismatch{fmt.Sprintf("is too small: it holds %d bytes, and the image with its hash tree needs %d", size, p.End())}
	}
	f, err := os.Open(part)
	if err != nil {
		return fmt.Errorf("when opening system slot %s: %w", slot, err)
	}
	defer f.Close()
	top := make([]byte, verity.BlockSize)
	if _, err := f.ReadAt(top, int64(p.TopOffset())); err != nil {
		return fmt.Errorf("when reading the top of system slot %s's hash tree: %w", slot, err)
	}
	switch {
	case p.IsTop(top):
		return nil
	case bytes.Count(top, []byte{0}) == len(top):
		return &slotMismatch{fmt.Sprintf("is empty: zeros where the hash tree's top would be, at byte %d", p.TopOffset())}
	}
	return &slotMismatch{fmt.Sprintf("holds another image: the block where the hash tree's top would be, at byte %d, does not hash to the root hash", p.TopOffset())}
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
