package efivar

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBootEntryName(t *testing.T) {
	for n, want := range map[uint16]string{0: "Boot0000", 0xa: "Boot000A", 0xbeef: "BootBEEF"} {
		if got := BootEntryName(n); got != want {
			t.Errorf("BootEntryName(%#x) = %q, want %q", n, got, want)
		}
		if back, ok := parseBootEntryName(want); !ok || back != n {
			t.Errorf("parseBootEntryName(%q) = %#x, %v, want %#x, true", want, back, ok, n)
		}
	}
	for _, name := range []string{"Boot000a", "Boot00000", "Boot", "BootOrder", "BootNext", "Driver0000"} {
		if n, ok := parseBootEntryName(name); ok {
			t.Errorf("parseBootEntryName(%q) = %#x, true, want false", name, n)
		}
	}
}

func TestBootOrder(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadBootOrder(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadBootOrder(unset) = %v, want os.ErrNotExist", err)
	}
	if err := WriteBootOrder(dir, []uint16{3, 0, 0x1001}); err != nil {
		t.Fatal(err)
	}
	attrs, raw, err := Read(dir, "BootOrder", GlobalVariable)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{3, 0, 0, 0, 0x01, 0x10}; attrs != 7 || !slices.Equal(raw, want) {
		t.Errorf("BootOrder = %#x, % x, want 0x7, % x", attrs, raw, want)
	}
	got, err := ReadBootOrder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint16{3, 0, 0x1001}; !slices.Equal(got, want) {
		t.Errorf("ReadBootOrder = %v, want %v", got, want)
	}
	if err := Write(dir, "BootOrder", GlobalVariable, 7, []byte{1, 0, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBootOrder(dir); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadBootOrder(odd length) = %v, want ErrInvalid", err)
	}
}

func TestBootNextAndCurrent(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadBootNext(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadBootNext(unset) = %v, want os.ErrNotExist", err)
	}
	if err := WriteBootNext(dir, 0x0102); err != nil {
		t.Fatal(err)
	}
	if _, raw, err := Read(dir, "BootNext", GlobalVariable); err != nil || !slices.Equal(raw, []byte{2, 1}) {
		t.Errorf("BootNext holds % x, %v, want 02 01", raw, err)
	}
	if n, err := ReadBootNext(dir); err != nil || n != 0x0102 {
		t.Errorf("ReadBootNext = %#x, %v, want 0x102", n, err)
	}
	if err := DeleteBootNext(dir); err != nil {
		t.Fatal(err)
	}
	if err := DeleteBootNext(dir); err != nil {
		t.Errorf("DeleteBootNext(unset) = %v, want nil", err)
	}
	// The firmware sets BootCurrent; a node only reads it.
	if err := Write(dir, "BootCurrent", GlobalVariable, BootServiceAccess|RuntimeAccess, []byte{4, 0}); err != nil {
		t.Fatal(err)
	}
	if n, err := ReadBootCurrent(dir); err != nil || n != 4 {
		t.Errorf("ReadBootCurrent = %#x, %v, want 4", n, err)
	}
	if err := Write(dir, "BootCurrent", GlobalVariable, 6, []byte{4}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBootCurrent(dir); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadBootCurrent(1 byte) = %v, want ErrInvalid", err)
	}
}

func TestBootEntry(t *testing.T) {
	dir := t.TempDir()
	o := &LoadOption{Attributes: LoadOptionActive, Description: "Cairn system-b", FilePath: hdPath()}
	if err := WriteBootEntry(dir, 0xb, o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "Boot000B-8be4df61-93ca-11d2-aa0d-00e098032b8c")); err != nil {
		t.Errorf("WriteBootEntry wrote no Boot000B: %v", err)
	}
	got, err := ReadBootEntry(dir, 0xb)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(o, got); diff != "" {
		t.Errorf("ReadBootEntry mismatch (-want +got):\n%s", diff)
	}
}

func TestBootEntryFor(t *testing.T) {
	pathA, err := ESPFile(espTable(), 1, "EFI/cairn/system-a.efi")
	if err != nil {
		t.Fatal(err)
	}
	pathB, err := ESPFile(espTable(), 1, "EFI/cairn/system-b.efi")
	if err != nil {
		t.Fatal(err)
	}
	// What OVMF keeps: its shell and boot menu in the firmware volume, as
	// raw nodes here.
	firmware := &LoadOption{Attributes: LoadOptionActive, Description: "UiApp",
		FilePath: DevicePath{RawNode{Type: 4, SubType: 7, Data: make([]byte, 16)}}}
	write := func(t *testing.T, dir string, n uint16, o *LoadOption) {
		t.Helper()
		if err := WriteBootEntry(dir, n, o); err != nil {
			t.Fatal(err)
		}
	}
	garbage := func(t *testing.T, dir string, name string) {
		t.Helper()
		if err := Write(dir, name, GlobalVariable, 7, []byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		fill   func(t *testing.T, dir string)
		want   uint16
		exists bool
	}{
		{"empty", func(*testing.T, string) {}, 0, false},
		{"next to the firmware's", func(t *testing.T, dir string) {
			write(t, dir, 0, firmware)
			write(t, dir, 1, firmware)
			write(t, dir, 3, firmware)
		}, 2, false},
		{"the slot's own entry", func(t *testing.T, dir string) {
			write(t, dir, 0, firmware)
			write(t, dir, 1, &LoadOption{Attributes: LoadOptionActive, Description: "a", FilePath: pathA})
			write(t, dir, 2, &LoadOption{Description: "b, inactive", FilePath: pathB, OptionalData: []byte{1}})
		}, 2, true},
		{"undecodable entries keep their numbers", func(t *testing.T, dir string) {
			garbage(t, dir, "Boot0000")
			garbage(t, dir, "Boot0001")
			write(t, dir, 2, &LoadOption{Description: "a", FilePath: pathA})
		}, 3, false},
		{"other variables and vendors do not count", func(t *testing.T, dir string) {
			garbage(t, dir, "BootOrder")
			garbage(t, dir, "Boot000a")
			if err := Write(dir, "Boot0000", testVendor, 7, []byte{1}); err != nil {
				t.Fatal(err)
			}
		}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.fill(t, dir)
			n, exists, err := BootEntryFor(dir, pathB)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want || exists != tc.exists {
				t.Errorf("BootEntryFor(%s) = %#x, %v, want %#x, %v", pathB, n, exists, tc.want, tc.exists)
			}
		})
	}
	if _, _, err := BootEntryFor(filepath.Join(t.TempDir(), "missing"), pathB); err == nil {
		t.Error("BootEntryFor(missing directory) succeeded, want an error")
	}
}

func TestReadSecureBoot(t *testing.T) {
	dir := t.TempDir()
	if on, err := ReadSecureBoot(dir); err != nil || on {
		t.Errorf("ReadSecureBoot(no variable) = %t, %v; want false, nil", on, err)
	}
	attrs := BootServiceAccess | RuntimeAccess
	for _, tc := range []struct {
		data    []byte
		want    bool
		invalid bool
	}{
		{[]byte{1}, true, false},
		{[]byte{0}, false, false},
		{[]byte{2}, false, true},
		{[]byte{1, 0}, false, true},
		{nil, false, true},
	} {
		if err := Write(dir, "SecureBoot", GlobalVariable, attrs, tc.data); err != nil {
			t.Fatal(err)
		}
		on, err := ReadSecureBoot(dir)
		if on != tc.want || errors.Is(err, ErrInvalid) != tc.invalid || (err != nil) != tc.invalid {
			t.Errorf("ReadSecureBoot(% x) = %t, %v; want %t, invalid %t", tc.data, on, err, tc.want, tc.invalid)
		}
	}
}
