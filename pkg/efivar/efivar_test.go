package efivar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

var testVendor = uuid.MustParse("4a67b082-0a4c-41cf-b6c7-440b29bb8c4f")

func TestReadWriteDelete(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Read(dir, "Test", testVendor); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read(missing) = %v, want os.ErrNotExist", err)
	}
	attrs := NonVolatile | BootServiceAccess | RuntimeAccess
	if err := Write(dir, "Test", testVendor, attrs, []byte("longer data")); err != nil {
		t.Fatal(err)
	}
	// The file is what efivarfs shows: attributes little-endian, data.
	raw, err := os.ReadFile(filepath.Join(dir, "Test-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"))
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{7, 0, 0, 0}, "longer data"...); !bytes.Equal(raw, want) {
		t.Errorf("file holds % x, want % x", raw, want)
	}
	// Writing over a longer value leaves nothing of it.
	if err := Write(dir, "Test", testVendor, BootServiceAccess, []byte("ab")); err != nil {
		t.Fatal(err)
	}
	gotAttrs, data, err := Read(dir, "Test", testVendor)
	if err != nil {
		t.Fatal(err)
	}
	if gotAttrs != BootServiceAccess || string(data) != "ab" {
		t.Errorf("Read = %#x, %q, want %#x, %q", gotAttrs, data, BootServiceAccess, "ab")
	}
	if err := Delete(dir, "Test", testVendor); err != nil {
		t.Fatal(err)
	}
	if err := Delete(dir, "Test", testVendor); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestReadShortFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Short-"+testVendor.String()), []byte{1, 2}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir, "Short", testVendor); err == nil {
		t.Error("Read(2-byte file) succeeded, want an error")
	}
}

// TestWriteImmutable writes and deletes a variable whose file is
// immutable, as efivarfs makes most. Setting the flag takes
// CAP_LINUX_IMMUTABLE and a file system with inode flags; where the test
// has neither, it cannot exercise the ioctl and checks only that Write
// and Delete treat the file as mutable, as they must on tmpfs.
func TestWriteImmutable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Locked-"+testVendor.String())
	if err := Write(dir, "Locked", testVendor, NonVolatile, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := setImmutable(path); err != nil {
		t.Logf("cannot make a file immutable here (%v): checking the path without the flag", err)
		if err := Write(dir, "Locked", testVendor, NonVolatile, []byte("two")); err != nil {
			t.Fatal(err)
		}
		if err := Delete(dir, "Locked", testVendor); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Cleanup(func() { clearImmutable(path) })
	if err := os.WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("an immutable file took a plain write; the test cannot tell anything")
	}
	if err := Write(dir, "Locked", testVendor, NonVolatile, []byte("two")); err != nil {
		t.Fatalf("Write(immutable): %v", err)
	}
	if _, data, err := Read(dir, "Locked", testVendor); err != nil || string(data) != "two" {
		t.Errorf("Read after Write = %q, %v, want %q", data, err, "two")
	}
	if was, err := clearImmutable(path); err != nil || !was {
		t.Errorf("after Write the file is immutable: %v, %v; want true, nil", was, err)
	}
	if err := setImmutable(path); err != nil {
		t.Fatal(err)
	}
	if err := Delete(dir, "Locked", testVendor); err != nil {
		t.Fatalf("Delete(immutable): %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Delete: %v, want the file gone", err)
	}
}

func TestNoFlags(t *testing.T) {
	// What file systems without inode flags answer FS_IOC_GETFLAGS with;
	// tmpfs before Linux 6.0 is one, so a test cannot count on meeting
	// it.
	for _, errno := range []error{unix.ENOTTY, unix.EOPNOTSUPP, unix.EINVAL} {
		if !noFlags(errno) {
			t.Errorf("noFlags(%v) = false, want true", errno)
		}
	}
	if noFlags(os.ErrPermission) {
		t.Errorf("noFlags(%v) = true, want false", os.ErrPermission)
	}
}
