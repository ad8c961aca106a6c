//go:build e2e

package e2e

import (
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/verity"
	"cairn.dev/cairn/test/launch"
)

// TestSystemPartitionCorrupt boots, the way a machine does (OVMF, the
// unified kernel image on the ESP), a copy of the image with one byte of
// system-a's first block flipped: a byte EROFS itself never reads, which
// only dm-verity can notice. The node must say, once, which slot does not
// match which root hash, and that no slot matches (system-b is empty),
// mount nothing after it, stay up, and power off cleanly when the power
// button is pressed.
func TestSystemPartitionCorrupt(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	disk, slot := corruptCopy(t, func(f *os.File, slot gpt.Partition, p verity.Params) error {
		return flipByte(f, int64(slot.FirstLBA)*512+100)
	})
	root := hex.EncodeToString(systemParams(t).RootHash)
	n := s.launch(launch.Config{Name: "corrupt", Image: disk})

	l := s.waitFor(n, launch.Substring("cairn: system partition a is corrupt"))
	s.stepSinceInit(n, l, "/init → corruption reported")
	if !strings.Contains(l.Text, root) {
		t.Errorf("corruption line %q does not name the expected root hash %s", l.Text, root)
	}
	// The command line names no slot: slot b, empty in the image, was
	// tried too, and the node says once why neither is used.
	none := s.waitFor(n, launch.Substring("cairn: no verified system partition: no system slot matches the root hash "+root))
	if !strings.Contains(none.Text, "slot a: ") || !strings.Contains(none.Text, "slot b is empty") {
		t.Errorf("no-system line %q does not give both slots' reasons", none.Text)
	}
	verityLine := regexp.MustCompile(`device-mapper: verity: .*data block 0 is corrupted`)
	if _, ok := n.Console().Find(0, verityLine); !ok {
		t.Errorf("no kernel line matching %q: dm-verity did not find the flipped byte in %s (LBA %d)", verityLine, slot.Name, slot.FirstLBA)
	}
	// The node stays up; the supervisor restarts the storage child, which
	// keeps failing, with a growing pause.
	time.Sleep(5 * time.Second)

	s.powerOff(n)
	var said int
	for _, l := range n.Console().Lines() {
		if strings.Contains(l.Text, "cairn: system partition a is corrupt") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("the corruption was said %d times on the console, want once", said)
	}
	if l, ok := n.Console().Find(0, launch.Substring("cairn: system partition a mounted")); ok {
		t.Errorf("the corrupt system partition was mounted: %q", l.Text)
	}
}

// TestSystemSlotB asks what every A/B update relies on: whether the one
// signed unified kernel image, which names no slot, boots from slot b.
// It boots through OVMF a copy of the image whose system image was
// copied into system-b, and whose system-a has a byte changed in the top
// of its hash tree, so that it holds another image. The node must pass
// slot a over without a verity device (no kernel line about corruption),
// mount slot b, and call nothing corrupt.
func TestSystemSlotB(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	disk := copyImage(t)
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tab := readGPT(t, f)
	a, b := tab.Find(gpt.TypeCairnSystemA), tab.Find(gpt.TypeCairnSystemB)
	if a < 0 || b < 0 {
		t.Fatalf("the image lacks a system slot: %+v", tab.Entries)
	}
	p := systemParams(t)
	from, to := int64(tab.Entries[a].FirstLBA)*512, int64(tab.Entries[b].FirstLBA)*512
	buf := make([]byte, 1<<20)
	for off := int64(0); off < int64(p.End()); off += int64(len(buf)) {
		n := min(int64(len(buf)), int64(p.End())-off)
		if _, err := f.ReadAt(buf[:n], from+off); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(buf[:n], to+off); err != nil {
			t.Fatal(err)
		}
	}
	if err := flipByte(f, from+int64(p.TopOffset())+7); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	n := s.launch(launch.Config{Name: "slotb", Image: disk})

	l := s.waitFor(n, launch.Substring("cairn: system partition b mounted at /system"))
	s.stepSinceInit(n, l, "/init → system partition b mounted")
	s.powerOff(n)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`device-mapper: verity: .*corrupted`),
		regexp.MustCompile(`cairn: system partition . is corrupt|cairn: no verified system partition`),
	} {
		if l, ok := n.Console().Find(0, bad); ok {
			t.Errorf("the console says %q: slot a was not passed over quietly", l.Text)
		}
	}
}

// TestSystemPartitionTamperedLater boots the direct path (out/cmdline,
// which carries the verity parameters, and the test initramfs) from a copy
// of the image whose system-a has one byte flipped in every block but the
// first ones, which MountSystem checks: the slot mounts, and the first
// read of anything on it after that fails with an I/O error instead of
// returning other bytes. The storage child's first such read is the
// system partition's module directory, which it binds over the
// initramfs's: the child fails there, saying why, and goes no further.
func TestSystemPartitionTamperedLater(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	disk, _ := corruptCopy(t, func(f *os.File, slot gpt.Partition, p verity.Params) error {
		start := int64(slot.FirstLBA) * 512
		for b := int64(16); b < int64(p.DataBlocks); b++ {
			if err := flipByte(f, start+b*verity.BlockSize+7); err != nil {
				return err
			}
		}
		return nil
	})
	keys := randomHex(t, 64) + ":" + randomHex(t, 64)
	n := s.bootDisk("tampered", disk, "cairn.test.storage-keys="+keys)

	mounted := s.waitFor(n, launch.Substring("cairn: system partition a mounted"))
	s.stepSinceInit(n, mounted, "/init → system partition mounted")
	l := s.waitFor(n, regexp.MustCompile(`root\.storage .*died: `))
	if !strings.Contains(l.Text, "system partition's modules") || !strings.Contains(l.Text, "input/output error") {
		t.Errorf("the storage child died with %q, want an input/output error reading the system partition's modules", l.Text)
	}
	if l, ok := n.Console().Find(0, launch.Substring("cairn: data partition mounted")); ok {
		t.Errorf("the data partition was mounted from a tampered /system: %q", l.Text)
	}
	if _, ok := n.Console().Find(0, regexp.MustCompile(`device-mapper: verity: .*data block [0-9]+ is corrupted`)); !ok {
		t.Errorf("no kernel line says which block dm-verity refused")
	}
	s.powerOff(n)
}

// systemParams reads the verity parameters of the image's command line.
func systemParams(t *testing.T) verity.Params {
	t.Helper()
	b, err := os.ReadFile(artifact(t, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cmdline.Parse(strings.TrimSpace(string(b))).Lookup("cairn.verity")
	if !ok {
		t.Fatalf("out/cmdline has no cairn.verity: %s", b)
	}
	p, err := verity.ParseParams(v.Value)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// corruptCopy copies the image sparsely and lets change damage system-a
// of the copy; it returns the copy's path and the slot.
func corruptCopy(t *testing.T, change func(f *os.File, slot gpt.Partition, p verity.Params) error) (string, gpt.Partition) {
	t.Helper()
	disk := copyImage(t)
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab := readGPT(t, f)
	i := tab.Find(gpt.TypeCairnSystemA)
	if i < 0 {
		t.Fatalf("the image has no system-a partition: %+v", tab.Entries)
	}
	if err := change(f, tab.Entries[i], systemParams(t)); err != nil {
		t.Fatalf("damaging system-a: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return disk, tab.Entries[i]
}

// flipByte inverts the byte at off of f.
func flipByte(f *os.File, off int64) error {
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return fmt.Errorf("when reading byte %d: %w", off, err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("when writing byte %d: %w", off, err)
	}
	return nil
}
