package efivar

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsImmutable is FS_IMMUTABLE_FL of linux/fs.h, which x/sys/unix lacks.
const fsImmutable = 0x00000010

// clearImmutable clears FS_IMMUTABLE_FL on path and reports whether it was
// set. A file that does not exist, or lives on a file system without
// inode flags (tmpfs of older kernels: ENOTTY, EOPNOTSUPP or EINVAL), is
// not immutable.
func clearImmutable(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("when opening %s for its flags: %w", path, err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if noFlags(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("when reading the flags of %s: %w", path, err)
	}
	if flags&fsImmutable == 0 {
		return false, nil
	}
	err = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^fsImmutable))
	if err != nil {
		return false, fmt.Errorf("when making %s mutable: %w", path, err)
	}
	return true, nil
}

// setImmutable sets FS_IMMUTABLE_FL on path again.
func setImmutable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("when opening %s for its flags: %w", path, err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("when reading the flags of %s: %w", path, err)
	}
	err = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsImmutable))
	if err != nil {
		return fmt.Errorf("when making %s immutable again: %w", path, err)
	}
	return nil
}

// noFlags reports whether err says the file system has no inode flags.
func noFlags(err error) bool {
	return errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
}
