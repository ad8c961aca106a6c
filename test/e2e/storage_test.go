//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/test/launch"
)

// TestDataPartition boots one node four times from the same disk, a copy of
// the image whose free space has never been used, with the test-only flag
// cairn.test.storage-keys:
//
//  1. the node creates and encrypts the data partition and writes a marker;
//  2. after a clean power-off it finds the marker again, and the raw disk
//     does not hold the marker in plaintext;
//  3. with a wrong cluster key it says so and leaves the data partition
//     byte for byte as it was;
//  4. with the right keys again it still finds the marker.
//
// The kernel is booted directly to pass the flags, so the node has no
// LoaderDevicePartUUID and finds its disk as the only one with an ESP.
func TestDataPartition(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	disk := copyImage(t)
	nodeKey, clusterKey, wrongKey := randomHex(t, 64), randomHex(t, 64), randomHex(t, 64)
	marker := "cairn-e2e-marker-" + randomHex(t, 8)
	keys := nodeKey + ":" + clusterKey
	flags := func(k string) string {
		return "cairn.test.storage-keys=" + k + " cairn.test.marker=" + marker
	}

	n := s.bootDisk("1-new", disk, flags(keys))
	s.dataMounted(n, "new", "boot 1: /init → data partition mounted (new, with mkfs)")
	s.waitFor(n, launch.Substring("cairn: wrote marker"))
	s.powerOff(n)

	n = s.bootDisk("2-existing", disk, flags(keys))
	s.dataMounted(n, "existing", "boot 2: /init → data partition mounted (existing)")
	s.waitFor(n, launch.Substring("cairn: found marker "+marker))
	s.powerOff(n)

	raw, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("CAIRNDAT")) {
		t.Fatalf("the disk holds no data partition header: the node did not write to %s", disk)
	}
	if i := bytes.Index(raw, []byte(marker)); i >= 0 {
		t.Errorf("the marker %q is on the raw disk in plaintext at byte %d", marker, i)
	}
	before := dataPartitionSum(t, disk)

	n = s.bootDisk("3-wrong-key", disk, flags(nodeKey+":"+wrongKey))
	l := s.waitFor(n, launch.Substring("cairn: data partition not mounted"))
	if !strings.Contains(l.Text, "wrong key") || !strings.Contains(l.Text, "not formatting") {
		t.Errorf("wrong key gave %q, want an error that names a wrong key and says nothing is formatted", l.Text)
	}
	s.powerOff(n)
	if _, ok := n.Console().Find(0, launch.Substring("cairn: data partition mounted")); ok {
		t.Errorf("the data partition was mounted with a wrong key")
	}
	if after := dataPartitionSum(t, disk); after != before {
		t.Errorf("booting with a wrong key changed the data partition: sha256 %s before, %s after", before, after)
	}

	n = s.bootDisk("4-right-key", disk, flags(keys))
	s.dataMounted(n, "existing", "boot 4: /init → data partition mounted (existing)")
	s.waitFor(n, launch.Substring("cairn: found marker "+marker))
	s.powerOff(n)
}

// bootDisk boots the image's kernel directly with extra kernel flags and
// disk as the node's virtio disk, written in place so that it outlives the
// node. The console goes to out/e2e/<test>_<name>.console.log.
func (s *suite) bootDisk(name, disk, flags string, opts ...launch.Option) *launch.Node {
	s.t.Helper()
	return s.bootDiskInitrd(name, disk, artifact(s.t, "initramfs-test.img"), flags, opts...)
}

// bootDiskInitrd is bootDisk with the initramfs initrd, which must hold
// the test hooks.
func (s *suite) bootDiskInitrd(name, disk, initrd, flags string, opts ...launch.Option) *launch.Node {
	s.t.Helper()
	cmdline, err := os.ReadFile(artifact(s.t, "cmdline"))
	if err != nil {
		s.t.Fatal(err)
	}
	logDir := filepath.Join(repoRoot(s.t), "out", "e2e")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	logFile := filepath.Join(logDir, strings.ReplaceAll(s.t.Name(), "/", "_")+"_"+name+".console.log")
	opts = append([]launch.Option{
		launch.WithNetwork(launch.NoNetwork{}),
		launch.WithDirectBoot(launch.DirectBoot{
			Kernel:  artifact(s.t, "vmlinuz"),
			Initrd:  initrd, // the test hooks: cairn.test.*
			Cmdline: strings.TrimSpace(string(cmdline)) + " " + flags,
		}),
		launch.WithWritableImage(),
	}, opts...)
	opts = append(opts, launch.WithConsoleFile(logFile))
	n, err := launch.Launch(s.ctx, launch.Config{Name: name, Image: disk, MemoryMiB: *memoryFlag}, opts...)
	if err != nil {
		s.t.Fatalf("launching %s: %v", name, err)
	}
	s.closeAtEnd(n, logFile)
	return n
}

// dataMounted waits for the node to mount its data partition the way
// given ("new" or "existing") and records the time from /init's start.
func (s *suite) dataMounted(n *launch.Node, how, step string) {
	s.t.Helper()
	mounted := s.waitFor(n, launch.Substring("cairn: data partition mounted ("+how+")"))
	s.stepSinceInit(n, mounted, step)
}

// stepSinceInit records the guest time from /init's first line to l.
func (s *suite) stepSinceInit(n *launch.Node, l launch.Line, step string) {
	s.t.Helper()
	start, ok := n.Console().Find(0, launch.CairnBoot.Init)
	if !ok {
		s.t.Errorf("no %v line on the console of %s", launch.CairnBoot.Init, n.Name())
		return
	}
	a, ok1 := start.Uptime()
	b, ok2 := l.Uptime()
	if !ok1 || !ok2 {
		s.t.Errorf("no guest uptime on %q or %q", start.Text, l.Text)
		return
	}
	s.step(step, b-a)
}

// powerOff presses n's power button and waits for qemu to exit.
func (s *suite) powerOff(n *launch.Node) {
	s.t.Helper()
	if err := n.Powerdown(s.ctx); err != nil {
		s.t.Fatalf("system_powerdown of %s: %v", n.Name(), err)
	}
	if err := n.Wait(s.ctxWithin(60 * time.Second)); err != nil {
		s.t.Fatalf("%s did not power off within 60 s: %v", n.Name(), err)
	}
	if _, ok := n.Console().Find(0, launch.Substring("cairn: unmounted filesystems")); !ok {
		s.t.Errorf("%s powered off without unmounting its filesystems", n.Name())
	}
	assertNoPanic(s.t, n)
	if err := n.Close(); err != nil {
		s.t.Errorf("closing %s: %v", n.Name(), err)
	}
}

// readGPT reads the partition table of the disk image f.
func readGPT(t *testing.T, f *os.File) *gpt.Table {
	t.Helper()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gpt.Read(f, st.Size(), 512)
	if err != nil {
		t.Fatalf("reading the GPT of %s: %v", f.Name(), err)
	}
	return tab
}

// dataPartitionSum returns the SHA-256 of the disk's data partition: the
// one GPT entry of Cairn's data partition type.
func dataPartitionSum(t *testing.T, disk string) string {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab := readGPT(t, f)
	var data []gpt.Partition
	for _, p := range tab.Entries {
		if p.Type == gpt.TypeCairnData {
			data = append(data, p)
		}
	}
	if len(data) != 1 {
		t.Fatalf("the disk has %d data partitions, want 1: %+v", len(data), tab.Entries)
	}
	h := sha256.New()
	r := io.NewSectionReader(f, int64(data[0].FirstLBA)*512, int64(data[0].Sectors())*512)
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// randomHex returns n random bytes in hex.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
