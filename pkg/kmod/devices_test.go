package kmod

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeEvents is an eventSource whose additions the test queues.
type fakeEvents struct {
	mu       sync.Mutex
	queued   []string
	lost     bool
	closed   bool
	readings int
}

func (f *fakeEvents) add(modalias string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued = append(f.queued, modalias)
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
	if err := devices.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
