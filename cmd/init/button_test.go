package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/evdev"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// requests records the actions a power runnable asks for.
type requests struct {
	c chan action
}

func newRequests() *requests { return &requests{c: make(chan action, 8)} }

func (r *requests) request(a action) { r.c <- a }

func (r *requests) wait(t *testing.T, want action) {
	t.Helper()
	select {
	case got := <-r.c:
		if got != want {
			t.Errorf("requested %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no request, want %v", want)
	}
}

// TestPowerSignals checks that forwarded signals become requests, on a
// machine without a power button.
func TestPowerSignals(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	reqs := newRequests()
	p := &power{signals: sigs, request: reqs.request, buttons: &powerButtons{}}
	supervisortest.Harness(t, p.run)
	sigs <- unix.SIGINT
	reqs.wait(t, reboot)
	sigs <- unix.SIGTERM
	reqs.wait(t, poweroff)
}

// TestPowerButton gives the power runnable a fake input device, a FIFO
// named like an event node whose sysfs name is "Power Button", and presses
// the button through it.
func TestPowerButton(t *testing.T) {
	class, dev := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(class, "event0", "device"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(class, "event0", "device", "name"), []byte("Power Button\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dev, "event0")
	if err := unix.Mkfifo(node, 0o600); err != nil {
		t.Fatal(err)
	}
	reqs := newRequests()

	// Opened read-write, a FIFO does not wait for a reader. Closed in a
	// cleanup registered before the harness's, the writer outlives the
	// tree, so the runnable ends by cancellation rather than EOF. The
	// button is pressed before the tree runs: the press must wait in the
	// device opened beforehand, as one during boot does.
	w, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	buttons := openPowerButtons(class, dev, false, logtree.New().LeveledFor("test"))
	t.Cleanup(buttons.Close)
	if len(buttons.devices) != 1 {
		t.Fatalf("openPowerButtons found %d devices, want 1", len(buttons.devices))
	}
	p := &power{signals: make(chan os.Signal), request: reqs.request, buttons: buttons}
	writeEvent(t, w, evdev.EvKey, evdev.KeyPower, evdev.KeyPressed)
	writeEvent(t, w, evdev.EvSyn, 0, 0)
	supervisortest.Harness(t, p.run)
	reqs.wait(t, poweroff)
}

func writeEvent(t *testing.T, w io.Writer, typ, code uint16, value int32) {
	t.Helper()
	var b bytes.Buffer
	long := bits.UintSize / 8
	b.Write(make([]byte, 2*long)) // timestamp
	binary.Write(&b, binary.NativeEndian, typ)
	binary.Write(&b, binary.NativeEndian, code)
	binary.Write(&b, binary.NativeEndian, value)
	if _, err := w.Write(b.Bytes()); err != nil {
		t.Fatalf("writing input event: %v", err)
	}
}

// TestStopRequest checks that the first request wins, cancels the tree
// once, prints the phase line, and that a stuck tree hits the deadline.
func TestStopRequest(t *testing.T) {
	var out bytes.Buffer
	var cancels int
	expired := make(chan action, 1)
	r := &stopRequest{
		cancel:   func() { cancels++ },
		con:      &consoles{out: []io.Writer{&out}},
		deadline: 50 * time.Millisecond,
		expired:  func(a action) { expired <- a },
	}
	if _, ok := r.requested(); ok {
		t.Errorf("requested() before any request = true, want false")
	}
	r.request(reboot)
	r.request(poweroff)
	if a, ok := r.requested(); !ok || a != reboot {
		t.Errorf("requested() = %v, %v, want reboot, true", a, ok)
	}
	if cancels != 1 {
		t.Errorf("cancelled %d times, want once", cancels)
	}
	select {
	case a := <-expired:
		if a != reboot {
			t.Errorf("deadline expired for %v, want reboot", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("deadline never expired")
	}
	r.con.mu.Lock()
	defer r.con.mu.Unlock()
	if !bytes.Contains(out.Bytes(), []byte("cairn: stopping for reboot\n")) || bytes.Contains(out.Bytes(), []byte("poweroff")) {
		t.Errorf("console got %q, want one stopping-for-reboot line", out.String())
	}
}
