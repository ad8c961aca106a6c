package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The boot manager's variables (UEFI specification, section 3.3), all of
// GlobalVariable.
const (
	bootOrderName   = "BootOrder"
	bootNextName    = "BootNext"
	bootCurrentName = "BootCurrent"
)

// BootEntryName is the variable of load option n: Boot and n as four
// uppercase hexadecimal digits, Boot000A.
func BootEntryName(n uint16) string { return fmt.Sprintf("Boot%04X", n) }

// parseBootEntryName returns the number of a Boot#### variable's name.
func parseBootEntryName(name string) (uint16, bool) {
	hex, ok := strings.CutPrefix(name, "Boot")
	if !ok || len(hex) != 4 || strings.ToUpper(hex) != hex {
		return 0, false
	}
	n, err := strconv.ParseUint(hex, 16, 16)
	return uint16(n), err == nil
}

// ReadBootOrder returns BootOrder from the efivarfs directory dir: the
// load options the firmware tries, in order.
func ReadBootOrder(dir string) ([]uint16, error) {
	_, b, err := Read(dir, bootOrderName, GlobalVariable)
	if err != nil {
		return nil, err
	}
	if len(b)%2 != 0 {
		return nil, fmt.Errorf("%w: BootOrder of odd length %d", ErrInvalid, len(b))
	}
	order := make([]uint16, len(b)/2)
	for i := range order {
		order[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return order, nil
}

// WriteBootOrder sets BootOrder in the efivarfs directory dir.
func WriteBootOrder(dir string, order []uint16) error {
	b := make([]byte, 0, 2*len(order))
	for _, n := range order {
		b = binary.LittleEndian.AppendUint16(b, n)
	}
	return Write(dir, bootOrderName, GlobalVariable, bootAttributes, b)
}

// ReadBootNext returns BootNext from the efivarfs directory dir: the load
// option the firmware boots once at the next boot, before BootOrder. Unset
// is an error wrapping os.ErrNotExist.
func ReadBootNext(dir string) (uint16, error) {
	return readUint16(dir, bootNextName)
}

// WriteBootNext sets BootNext in the efivarfs directory dir to n. The
// firmware deletes it when it boots n, so that n boots only once.
func WriteBootNext(dir string, n uint16) error {
	return Write(dir, bootNextName, GlobalVariable, bootAttributes, binary.LittleEndian.AppendUint16(nil, n))
}

// DeleteBootNext deletes BootNext from the efivarfs directory dir, if it
// is set.
func DeleteBootNext(dir string) error {
	err := Delete(dir, bootNextName, GlobalVariable)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// ReadBootCurrent returns BootCurrent from the efivarfs directory dir: the
// load option the firmware booted this time.
func ReadBootCurrent(dir string) (uint16, error) {
	return readUint16(dir, bootCurrentName)
}

func readUint16(dir, name string) (uint16, error) {
	_, b, err := Read(dir, name, GlobalVariable)
	if err != nil {
		return 0, err
	}
	if len(b) != 2 {
		return 0, fmt.Errorf("%w: %s is %d bytes long, not 2", ErrInvalid, name, len(b))
	}
	return binary.LittleEndian.Uint16(b), nil
}

// ReadBootEntry returns load option n (Boot####) from the efivarfs
// directory dir.
func ReadBootEntry(dir string, n uint16) (*LoadOption, error) {
	name := BootEntryName(n)
	_, b, err := Read(dir, name, GlobalVariable)
	if err != nil {
		return nil, err
	}
	o, err := ParseLoadOption(b)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", name, err)
	}
	return o, nil
}

// WriteBootEntry sets load option n (Boot####) in the efivarfs directory
// dir to o.
func WriteBootEntry(dir string, n uint16, o *LoadOption) error {
	b, err := o.Marshal()
	if err != nil {
		return fmt.Errorf("when writing %s: %w", BootEntryName(n), err)
	}
	return Write(dir, BootEntryName(n), GlobalVariable, bootAttributes, b)
}

// BootEntryFor returns the number of the load option in the efivarfs
// directory dir that boots path, and true; or, when none does, the lowest
// number no Boot#### variable uses, and false. Writing the entry for a
// system slot there each time keeps one entry per slot however many
// updates a node installs. Entries that do not decode are skipped: they
// cannot boot path, and their numbers stay taken.
func BootEntryFor(dir string, path DevicePath) (uint16, bool, error) {
	want, err := path.Marshal()
	if err != nil {
		return 0, false, fmt.Errorf("when looking for the boot entry of %s: %w", path, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, false, fmt.Errorf("when listing EFI variables: %w", err)
	}
	suffix := "-" + GlobalVariable.String()
	var used [1 << 16]bool
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok {
			continue
		}
		n, ok := parseBootEntryName(name)
		if !ok {
			continue
		}
		used[n] = true
		o, err := ReadBootEntry(dir, n)
		if err != nil {
			continue
		}
		if got, err := o.FilePath.Marshal(); err == nil && string(got) == string(want) {
			return n, true, nil
		}
	}
	for n := range used {
		if !used[n] {
			return uint16(n), false, nil
		}
	}
	return 0, false, fmt.Errorf("no free boot entry number for %s: all 65536 are used", path)
}

// ReadSecureBoot says whether the firmware booted the machine with Secure
// Boot enforced: its SecureBoot variable, which it sets at every boot, is
// 1. Firmware without Secure Boot has no such variable: false, not an
// error.
func ReadSecureBoot(dir string) (bool, error) {
	_, b, err := Read(dir, "SecureBoot", GlobalVariable)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(b) != 1 || b[0] > 1 {
		return false, fmt.Errorf("%w: SecureBoot holds % x, not one byte 0 or 1", ErrInvalid, b)
	}
	return b[0] == 1, nil
}
