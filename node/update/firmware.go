package update

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"cairn.dev/cairn/node/esp"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/efivar"
)

// Firmware is the firmware's boot manager as updates use it: one boot
// entry per installed system slot, booting the slot's unified kernel image
// on the ESP (EFI/cairn/system-<slot>.efi); BootNext for a trial boot,
// which the firmware clears before it boots it, so that whatever ends
// that boot (a panic, a watchdog reset, a power cut) is followed by the
// default; and BootOrder, whose first entry is the default.
type Firmware struct {
	// Vars is the efivarfs directory.
	Vars string
	// Path is the device path of a file on the ESP, given from its
	// root (localstorage.Storage.ESPFile).
	Path func(file string) (efivar.DevicePath, error)
}

// ukiPath is the path of slot's unified kernel image from the ESP's root.
func ukiPath(slot localstorage.Slot) string {
	return esp.UKIDir + "/" + esp.UKIName(string(slot))
}

// find returns the device path of slot's unified kernel image and the
// number of the boot entry that boots it, with found; or, when none does,
// the lowest free number (efivar.BootEntryFor).
func (f *Firmware) find(slot localstorage.Slot) (efivar.DevicePath, uint16, bool, error) {
	p, err := f.Path(ukiPath(slot))
	if err != nil {
		return nil, 0, false, fmt.Errorf("when finding the ESP for slot %s's boot entry: %w", slot, err)
	}
	n, found, err := efivar.BootEntryFor(f.Vars, p)
	return p, n, found, err
}

// entry makes sure a boot entry boots slot's unified kernel image, and
// returns its number. An entry that already does, active and named as
// Cairn names it, is left as it is: every write wears the firmware's
// flash.
func (f *Firmware) entry(slot localstorage.Slot) (uint16, error) {
	p, n, found, err := f.find(slot)
	if err != nil {
		return 0, err
	}
	o := &efivar.LoadOption{
		Attributes:  efivar.LoadOptionActive,
		Description: "Cairn system-" + string(slot),
		FilePath:    p,
	}
	if found {
		if old, err := efivar.ReadBootEntry(f.Vars, n); err == nil && old.Attributes == o.Attributes && old.Description == o.Description {
			return n, nil
		}
	}
	if err := efivar.WriteBootEntry(f.Vars, n, o); err != nil {
		return 0, fmt.Errorf("when writing slot %s's boot entry: %w", slot, err)
	}
	return n, nil
}

// TryOnce makes the firmware boot slot's unified kernel image at the next
// boot only.
func (f *Firmware) TryOnce(slot localstorage.Slot) error {
	n, err := f.entry(slot)
	if err != nil {
		return err
	}
	if err := efivar.WriteBootNext(f.Vars, n); err != nil {
		return fmt.Errorf("when asking the firmware to boot slot %s next (BootNext): %w", slot, err)
	}
	return nil
}

// MakeDefault puts the boot entries of slots first in BootOrder, in that
// order, so that every boot runs the first and falls back to the next;
// the other entries stay behind them in their order.
func (f *Firmware) MakeDefault(slots ...localstorage.Slot) error {
	first := make([]uint16, 0, len(slots))
	for _, slot := range slots {
		n, err := f.entry(slot)
		if err != nil {
			return err
		}
		first = append(first, n)
	}
	order, err := f.order()
	if err != nil {
		return err
	}
	order = append(first, slices.DeleteFunc(order, func(m uint16) bool { return slices.Contains(first, m) })...)
	if err := efivar.WriteBootOrder(f.Vars, order); err != nil {
		return fmt.Errorf("when making slot %s the default (BootOrder): %w", slots[0], err)
	}
	return nil
}

// Forget takes slot's boot entry out of BootOrder and BootNext, before
// the slot is written: the firmware must not fall back to a slot half
// written. The entry itself stays, to be used again.
func (f *Firmware) Forget(slot localstorage.Slot) error {
	_, n, found, err := f.find(slot)
	if err != nil || !found {
		return err
	}
	order, err := f.order()
	if err != nil {
		return err
	}
	if i := slices.Index(order, n); i >= 0 {
		if err := efivar.WriteBootOrder(f.Vars, slices.Delete(order, i, i+1)); err != nil {
			return fmt.Errorf("when taking slot %s out of BootOrder: %w", slot, err)
		}
	}
	if next, err := efivar.ReadBootNext(f.Vars); err == nil && next == n {
		if err := efivar.DeleteBootNext(f.Vars); err != nil {
			return fmt.Errorf("when taking slot %s out of BootNext: %w", slot, err)
		}
	}
	return nil
}

// order is BootOrder; empty when the firmware has none.
func (f *Firmware) order() ([]uint16, error) {
	order, err := efivar.ReadBootOrder(f.Vars)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when reading BootOrder: %w", err)
	}
	return order, nil
}

// Booted says which slot's unified kernel image the firmware booted this
// time (BootCurrent), and whether that boot was the default (the first
// entry of BootOrder) or a one-time boot. ok is false when the firmware
// booted something else: the image's own boot path (EFI/BOOT/BOOTX64.EFI),
// or a kernel handed over directly.
func (f *Firmware) Booted() (slot localstorage.Slot, isDefault, ok bool, err error) {
	cur, err := efivar.ReadBootCurrent(f.Vars)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("when reading BootCurrent: %w", err)
	}
	o, err := efivar.ReadBootEntry(f.Vars, cur)
	if err != nil {
		return "", false, false, fmt.Errorf("when reading the entry the firmware booted: %w", err)
	}
	slot, ok = slotOfEntry(o)
	if !ok {
		return "", false, false, nil
	}
	order, err := f.order()
	if err != nil {
		return "", false, false, err
	}
	return slot, len(order) > 0 && order[0] == cur, true, nil
}

// slotOfEntry is the system slot whose unified kernel image a boot entry
// loads, by the file its device path ends in.
func slotOfEntry(o *efivar.LoadOption) (localstorage.Slot, bool) {
	for _, node := range o.FilePath {
		fp, ok := node.(efivar.FilePath)
		if !ok {
			continue
		}
		p := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(fp.Path, `\`), `\`, "/"))
		for _, s := range []localstorage.Slot{localstorage.SlotA, localstorage.SlotB} {
			if p == strings.ToLower(ukiPath(s)) {
				return s, true
			}
		}
	}
	return "", false
}
