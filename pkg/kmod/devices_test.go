package kmod

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeEvents is an eventSource whose additions the test queues.
type fakeEvents struct {
	mu       sync.Mutex
	queued   []string
	lost     bool
	closed   bool
	readings int
	// queue is signalled, without blocking, at every add.
	queue chan struct{}
}

func (f *fakeEvents) add(modalias string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued = append(f.queued, modalias)
	if f.queue != nil {
		select {
		case f.queue <- struct{}{}:
		default:
		}
	}
}

func (f *fakeEvents) wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		n := len(f.queued)
		f.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.queue:
		}
	}
}

func (f *fakeEvents) added() ([]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readings++
	q, complete := f.queued, !f.lost
	f.queued, f.lost = nil, false
	return q, complete, nil
}

func (f *fakeEvents) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// TestColdplugFollowsUevents: with uevents, Coldplug walks sysfs once and
// finds the devices that loads bring from the events alone, loading what
// the walk-every-round Coldplug of TestColdplug loads.
func TestColdplugFollowsUevents(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "pci0000:00/0000:00:02.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	events := &fakeEvents{}
	devices := &Devices{dir: sys, events: events}
	k := &fakeKernel{}
	// The devices the loads bring are announced only as uevents: a walk
	// would not find them, so only the events can have them loaded.
	k.onLoad = func(name string) {
		switch name {
		case "virtio_pci":
			events.add("virtio:d00000001v00001AF4")
		case "button":
			events.add("input:b0019v0000p0001e0000-e0,1,k74,ramlsfw")
		}
	}
	log := &fakeLog{}
	l := newTestLoader(t, k, log)
	if err := l.Coldplug(context.Background(), devices, nil); err != nil {
		t.Fatalf("Coldplug: %v", err)
	}
	got := l.Loaded()
	slices.Sort(got)
	want := []string{"button", "evdev", "failover", "net_failover", "virtio", "virtio_net", "virtio_pci", "virtio_pci_modern_dev", "virtio_ring"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Coldplug loaded (-want +got):\n%s", diff)
	}
	scans, _, fromEvents := devices.Stats()
	if scans != 1 || fromEvents != 2 {
		t.Errorf("Coldplug walked sysfs %d times and read %d devices from uevents, want 1 and 2", scans, fromEvents)
	}
	if !slices.ContainsFunc(log.lines, func(l string) bool { return strings.Contains(l, "1 walks of sysfs") }) {
		t.Errorf("Coldplug did not say what finding the devices cost: %q", log.lines)
	}

	// A second Coldplug over the same Devices, as the system partition's
	// pass is, walks nothing.
	if err := l.Coldplug(context.Background(), devices, nil); err != nil {
		t.Fatalf("second Coldplug: %v", err)
	}
	if scans, _, _ := devices.Stats(); scans != 1 {
		t.Errorf("the second Coldplug walked sysfs again (%d walks in all)", scans)
	}
	if err := devices.Close(); err != nil || !events.closed {
		t.Errorf("Close: %v, closed %v", err, events.closed)
	}
}

// TestDevicesLostEvents: when the kernel dropped uevents, Devices walks
// sysfs again and keeps what the events had brought.
func TestDevicesLostEvents(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	events := &fakeEvents{}
	devices := &Devices{dir: sys, events: events}
	if _, err := devices.Modaliases(); err != nil {
		t.Fatal(err)
	}
	events.add("virtio:d00000001v00001AF4")
	addDevice(t, sys, "platform/serial8250", "platform:serial8250") // its event was lost
	events.lost = true
	got, err := devices.Modaliases()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"acpi:LNXPWRBN:", "platform:serial8250", "virtio:d00000001v00001AF4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Modaliases after lost events (-want +got):\n%s", diff)
	}
	if scans, _, _ := devices.Stats(); scans != 2 {
		t.Errorf("Devices walked sysfs %d times, want 2 (the first, and after the loss)", scans)
	}
}

func TestParseUevent(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want string
		ok   bool
	}{
		{"add@/devices/pci0000:00/0000:00:02.0/virtio0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:02.0/virtio0\x00SUBSYSTEM=virtio\x00MODALIAS=virtio:d00000001v00001AF4\x00SEQNUM=1234\x00",
			"virtio:d00000001v00001AF4", true},
		// A device without a modalias, a removal, a binding, a header alone.
		{"add@/devices/virtual/block/loop0\x00ACTION=add\x00DEVPATH=/devices/virtual/block/loop0\x00SUBSYSTEM=block\x00SEQNUM=1\x00", "", false},
		{"remove@/devices/x\x00ACTION=remove\x00MODALIAS=pci:v1\x00", "", false},
		{"bind@/devices/x\x00ACTION=bind\x00MODALIAS=pci:v1\x00DRIVER=virtio_pci\x00", "", false},
		{"add@/devices/x", "", false},
		{"", "", false},
	} {
		got, ok := parseUevent([]byte(tc.msg))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseUevent(%q) = %q, %v; want %q, %v", tc.msg, got, ok, tc.want, tc.ok)
		}
	}
}

// TestWatchDevicesReadsTheKernelsSocket: WatchDevices joins the kernel's
// uevent group, walks sysfs once, and then reads the socket without
// blocking, whether or not the kernel announced anything meanwhile.
func TestWatchDevicesReadsTheKernelsSocket(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	devices, err := WatchDevices(sys)
	if err != nil {
		t.Fatalf("WatchDevices: %v", err)
	}
	for range 2 {
		got, err := devices.Modaliases()
		if err != nil {
			t.Fatalf("Modaliases: %v", err)
		}
		if !slices.Contains(got, "acpi:LNXPWRBN:") {
			t.Errorf("Modaliases = %q, want the walked device among them", got)
		}
	}
	if scans, _, _ := devices.Stats(); scans != 1 {
		t.Errorf("WatchDevices walked sysfs %d times, want once", scans)
	}

	// Waiting parks until the context ends, and then returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err = devices.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("Wait with nothing announced: %v after %v, want the context's deadline after 0.2 s", err, time.Since(start))
	}
	// A uevent the kernel sends ends the wait: writing "change" to a
	// device's uevent file makes the kernel announce it again (/dev/null:
	// nothing on the machine acts on it). Where sysfs is read-only, as in
	// some containers, this part cannot run and the test says so.
	const trigger = "/sys/devices/virtual/mem/null/uevent"
	if err := os.WriteFile(trigger, []byte("change"), 0); err != nil {
		t.Logf("not checking that a uevent ends a wait: %v", err)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := devices.Wait(ctx)
		cancel()
		if err != nil {
			t.Errorf("Wait after the kernel announced /dev/null: %v, want nil", err)
		}
		if _, err := devices.Modaliases(); err != nil {
			t.Errorf("Modaliases after the announcement: %v", err)
		}
	}
	if err := devices.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := devices.Wait(context.Background()); err == nil {
		t.Error("Wait on closed Devices returned nil, want an error")
	}
}
