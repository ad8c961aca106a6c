package efivar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Attributes are a variable's attribute bits (UEFI specification, section
// 8.2, GetVariable).
type Attributes uint32

// The attribute bits a node uses.
const (
	NonVolatile       Attributes = 0x00000001
	BootServiceAccess Attributes = 0x00000002
	RuntimeAccess     Attributes = 0x00000004
)

// bootAttributes are those of the boot manager's variables: kept across
// power cycles, readable by the firmware and by the running OS.
const bootAttributes = NonVolatile | BootServiceAccess | RuntimeAccess

// GlobalVariable is the vendor GUID of the variables the UEFI specification
// defines itself (EFI_GLOBAL_VARIABLE): the boot manager's among them.
var GlobalVariable = uuid.MustParse("8be4df61-93ca-11d2-aa0d-00e098032b8c")

// efivarfsMagic is efivarfs's file system type (statfs f_type).
const efivarfsMagic = 0xde5e81e4

// fileName is the efivarfs file of a variable: its name, a dash and the
// vendor GUID in lowercase text.
func fileName(dir, name string, vendor uuid.UUID) string {
	return filepath.Join(dir, name+"-"+vendor.String())
}

// Read returns the attributes and data of the variable name of vendor in
// the efivarfs directory dir. A variable that does not exist is an error
// wrapping os.ErrNotExist.
func Read(dir, name string, vendor uuid.UUID) (Attributes, []byte, error) {
	b, err := os.ReadFile(fileName(dir, name, vendor))
	if err != nil {
		return 0, nil, fmt.Errorf("when reading EFI variable %s: %w", name, err)
	}
	if len(b) < 4 {
		return 0, nil, fmt.Errorf("EFI variable %s is %d bytes long, shorter than its attributes", name, len(b))
	}
	return Attributes(binary.LittleEndian.Uint32(b)), b[4:], nil
}

// Write sets the variable name of vendor in the efivarfs directory dir to
// data with attrs, creating it if needed. The attributes and the data go
// in one write(2), as efivarfs requires. A variable that efivarfs marked
// immutable is made writable for the write and immutable again after it.
func Write(dir, name string, vendor uuid.UUID, attrs Attributes, data []byte) error {
	path := fileName(dir, name, vendor)
	immutable, err := clearImmutable(path)
	if err != nil {
		return fmt.Errorf("when writing EFI variable %s: %w", name, err)
	}
	err = writeWhole(dir, path, attrs, data)
	if immutable {
		// Put the flag back even after a failed write: efivarfs keeps
		// the variable as it was then.
		if serr := setImmutable(path); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if err != nil {
		return fmt.Errorf("when writing EFI variable %s: %w", name, err)
	}
	return nil
}

// writeWhole writes attrs and data to path in one write(2). efivarfs
// replaces the variable with what one write holds, and a file there is
// never truncated; a file elsewhere (a test's directory) is only its
// bytes, so there it is truncated first.
func writeWhole(dir, path string, attrs Attributes, data []byte) error {
	flags := os.O_WRONLY | os.O_CREATE
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("when looking at %s: %w", dir, err)
	}
	if uint32(st.Type) != efivarfsMagic {
		flags |= os.O_TRUNC
	}
	b := make([]byte, 4+len(data))
	binary.LittleEndian.PutUint32(b, uint32(attrs))
	copy(b[4:], data)
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	// One write(2), not os.File.Write's loop over short writes: a second
	// write would be a second, different variable.
	n, err := unix.Write(int(f.Fd()), b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes the variable name of vendor from the efivarfs directory
// dir. A variable that does not exist is an error wrapping
// os.ErrNotExist.
func Delete(dir, name string, vendor uuid.UUID) error {
	path := fileName(dir, name, vendor)
	if _, err := clearImmutable(path); err != nil {
		return fmt.Errorf("when deleting EFI variable %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("when deleting EFI variable %s: %w", name, err)
	}
	return nil
}
