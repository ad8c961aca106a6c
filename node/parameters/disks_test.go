package parameters

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/parameters/parameterstest"
)

// fakeBlock is a sysfs block class directory and the filesystems of its
// devices, for Disks: a device's filesystem is a directory whose files a
// mount copies into the mount point; a device without one does not mount.
type fakeBlock struct {
	t       *testing.T
	sys     string // the fake /sys/class/block
	devices string // the devices' sysfs directories, as the links point to
	fs      map[string]map[string][]byte
	mounted string
	mounts  []string
}

func newFakeBlock(t *testing.T) *fakeBlock {
	root := t.TempDir()
	f := &fakeBlock{t: t, sys: filepath.Join(root, "class", "block"), devices: filepath.Join(root, "devices"), fs: map[string]map[string][]byte{}}
	for _, d := range []string{f.sys, f.devices} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// attach adds a disk with sequence number seq, or, with parent set, a
// partition of parent, holding files.
func (f *fakeBlock) attach(name, parent, seq string, files map[string][]byte) {
	dir := filepath.Join(f.devices, name)
	if parent != "" {
		dir = filepath.Join(f.devices, parent, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if parent != "" {
		if err := os.WriteFile(filepath.Join(dir, "partition"), []byte("1\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
	} else if err := os.WriteFile(filepath.Join(dir, "diskseq"), []byte(seq+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(f.sys, name)); err != nil {
		f.t.Fatal(err)
	}
	if files != nil {
		f.fs["/dev/"+name] = files
	}
}

func (f *fakeBlock) detach(name string) {
	if err := os.Remove(filepath.Join(f.sys, name)); err != nil {
		f.t.Fatal(err)
	}
	delete(f.fs, "/dev/"+name)
}

func (f *fakeBlock) mount(device, dir string) error {
	if f.mounted != "" {
		f.t.Fatalf("mounting %s at %s while %s is mounted there", device, dir, f.mounted)
	}
	f.mounts = append(f.mounts, filepath.Base(device))
	files, ok := f.fs[device]
	if !ok {
		return errors.New("invalid argument")
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	f.mounted = device
	return nil
}

func (f *fakeBlock) unmount(dir string) error {
	if f.mounted == "" {
		f.t.Fatalf("unmounting %s with nothing mounted", dir)
	}
	f.mounted = ""
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeBlock) disks(boot string) *Disks {
	return &Disks{SysBlock: f.sys, Dev: "/dev", BootDisk: boot, Mount: f.mount, Unmount: f.unmount, Dir: f.t.TempDir(), Logf: f.t.Logf}
}

// TestDisksScan follows a node without parameters as disks come and go:
// the boot disk, the node's own devices and a disk without the file are
// passed over; a partition that holds the file gives its parameters; a
// disk is tried once while attached and again after it comes back; a
// garbled file is an error naming its device.
func TestDisksScan(t *testing.T) {
	f := newFakeBlock(t)
	want := parameterstest.Register(t)
	good, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string][]byte{DiskFile: good}

	// The boot disk holds the file on its ESP (a stale copy, say): it is
	// never read here, nor are device-mapper and loop devices.
	f.attach("vda", "", "1", nil)
	f.attach("vda1", "vda", "", params)
	f.attach("dm-0", "", "2", params)
	f.attach("loop0", "", "3", params)
	f.attach("vdb", "", "4", map[string][]byte{"other.txt": []byte("hello")})
	d := f.disks("vda")
	if l, src := d.Scan(); l != nil {
		t.Fatalf("Scan found %+v on %s, want nothing", l, src)
	}
	if want := "vdb"; strings.Join(f.mounts, ",") != want {
		t.Errorf("mounted %v, want only %s", f.mounts, want)
	}
	f.mounts = nil
	if l, _ := d.Scan(); l != nil || len(f.mounts) != 0 {
		t.Fatalf("second Scan found %+v after mounting %v, want nothing tried again", l, f.mounts)
	}

	// A stick with a partition table: the whole disk does not mount, its
	// partition holds the parameters.
	f.attach("sda", "", "5", nil)
	f.attach("sda1", "sda", "", params)
	l, src := d.Scan()
	if l == nil || l.Err != nil || src != "sda1" {
		t.Fatalf("Scan with sda1 attached = %+v from %q, want parameters from sda1", l, src)
	}
	if !proto.Equal(l.Parameters, want) {
		t.Errorf("Scan returned %v, want the register parameters written", l.Parameters)
	}
	if f.mounted != "" {
		t.Errorf("%s left mounted", f.mounted)
	}

	// Taken out and put back with a garbled file: tried again, and the
	// error names the device.
	f.detach("sda1")
	f.detach("sda")
	if l, _ := d.Scan(); l != nil {
		t.Fatalf("Scan with the stick out found %+v", l)
	}
	f.attach("sda", "", "6", nil)
	f.attach("sda1", "sda", "", map[string][]byte{DiskFile: []byte("garbage")})
	l, src = d.Scan()
	if l == nil || l.Err == nil || src != "sda1" || !strings.Contains(l.Err.Error(), "parameters disk sda1") {
		t.Fatalf("Scan with a garbled file = %+v from %q, want an error naming sda1", l, src)
	}
}

// TestDisksScanFileTooLarge: a file larger than any parameters is refused
// without being read whole.
func TestDisksScanFileTooLarge(t *testing.T) {
	f := newFakeBlock(t)
	f.attach("vdb", "", "1", map[string][]byte{DiskFile: make([]byte, maxSize+1)})
	l, _ := f.disks("vda").Scan()
	if l == nil || l.Err == nil || !strings.Contains(l.Err.Error(), "larger than") {
		t.Fatalf("Scan = %+v, want an error saying the file is too large", l)
	}
}
