package update

import (
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/localstorage/declarative"
	"cairn.dev/cairn/proto/private"
)

// ReadSlots reads the record of the system slots; an absent file is an
// empty record (nothing was ever installed).
func ReadSlots(f *declarative.File) (*private.SystemSlots, error) {
	b, err := f.Read()
	if errors.Is(err, os.ErrNotExist) {
		return &private.SystemSlots{}, nil
	}
	if err != nil {
		return nil, err
	}
	s := &private.SystemSlots{}
	if err := proto.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("when decoding %s: %w", f.FullPath(), err)
	}
	return s, nil
}

// record replaces slot's entry in the record of the system slots, stamped
// with the time.
func (i *Installer) record(slot localstorage.Slot, entry *private.SystemSlots_Slot) error {
	s, err := ReadSlots(i.cfg.Slots)
	if err != nil {
		// An unreadable record says nothing the installer needs: the
		// other slot is written over whatever it held.
		s = &private.SystemSlots{}
	}
	entry.ChangedUnixMillis = i.cfg.Now().UnixMilli()
	if slot == localstorage.SlotB {
		s.B = entry
	} else {
		s.A = entry
	}
	b, err := proto.Marshal(s)
	if err != nil {
		return fmt.Errorf("when encoding the record of the system slots: %w", err)
	}
	if err := i.cfg.Slots.Write(b); err != nil {
		return fmt.Errorf("when recording that slot %s is %s: %w", slot, entry.GetState(), err)
	}
	return nil
}

// SlotInfo is what one system slot holds, as the node knows it.
type SlotInfo struct {
	Slot localstorage.Slot
	// Running is set on the slot the node booted.
	Running bool
	// State is the installer's record; unspecified for a slot it never
	// wrote. The running slot that has no record ran before the node's
	// first update: GOOD.
	State private.SystemSlots_Slot_State
	// Version is the running version for the running slot, else the
	// record's.
	Version string
	// Reason says why a BAD slot's trial failed.
	Reason string
	// Digest is the digest of the release manifest the record says the
	// slot came from ("sha256:<hex>"); empty for a slot never written.
	Digest string
}

// Slots says what each system slot holds, a then b.
func (i *Installer) Slots() ([]SlotInfo, error) {
	rec, err := ReadSlots(i.cfg.Slots)
	if err != nil {
		return nil, err
	}
	var out []SlotInfo
	for _, s := range []localstorage.Slot{localstorage.SlotA, localstorage.SlotB} {
		e := slotEntry(rec, s)
		info := SlotInfo{Slot: s, State: e.GetState(), Version: e.GetVersion(), Reason: e.GetReason(), Digest: e.GetReleaseDigest()}
		if s == i.cfg.Running {
			info.Running, info.Version = true, i.cfg.Version.String()
			if info.State == private.SystemSlots_Slot_STATE_UNSPECIFIED {
				// The slot the node ran before its first update.
				info.State = private.SystemSlots_Slot_GOOD
			}
		}
		out = append(out, info)
	}
	return out, nil
}
