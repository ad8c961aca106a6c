package kmod

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addDevice creates a device directory with a modalias file in a fake
// sysfs tree.
func addDevice(t *testing.T, sys, dev, modalias string) {
	t.Helper()
	dir := filepath.Join(sys, dev)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modalias"), []byte(modalias+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
}

func TestColdplug(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "pci0000:00/0000:00:02.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	addDevice(t, sys, "pci0000:00/0000:00:1f.0", "pci:v00008086d00002918sv00001AF4sd00001100bc06sc01i00")
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	addDevice(t, sys, "platform/serial8250", "platform:serial8250")
	// A directory named modalias is not a modalias.
	if err := os.MkdirAll(filepath.Join(sys, "odd/modalias"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Like the real kernel, loading a driver makes new devices appear:
	// virtio_pci finds a virtio network device, button an input device.
	k := &fakeKernel{}
	k.onLoad = func(name string) {
		switch name {
		case "virtio_pci":
			addDevice(t, sys, "pci0000:00/0000:00:02.0/virtio0", "virtio:d00000001v00001AF4")
		case "button":
			addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00/input/input0", "input:b0019v0000p0001e0000-e0,1,k74,ramlsfw")
		}
	}
	l := newTestLoader(t, k, &fakeLog{})
	if err := l.Coldplug(context.Background(), sys); err != nil {
		t.Fatalf("Coldplug: %v", err)
	}
	want := []string{
		"button", // round 1, in sorted modalias order
		"virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci",
		"evdev", // round 2
		"failover", "net_failover", "virtio_net",
	}
	if diff := cmp.Diff(want, l.Loaded()); diff != "" {
		t.Errorf("Coldplug loaded (-want +got):\n%s", diff)
	}
}

func TestColdplugMissingSysfs(t *testing.T) {
	l := newTestLoader(t, &fakeKernel{}, &fakeLog{})
	if err := l.Coldplug(context.Background(), filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Errorf("Coldplug(missing dir) = nil, want an error")
	}
}

func TestColdplugCancelled(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := &fakeKernel{}
	l := newTestLoader(t, k, &fakeLog{})
	if err := l.Coldplug(ctx, sys); err == nil {
		t.Errorf("Coldplug(cancelled) = nil, want an error")
	}
	if len(k.loaded) != 0 {
		t.Errorf("Coldplug(cancelled) loaded %q, want nothing", k.loaded)
	}
}

func TestScanModaliases(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "a", "x:1")
	addDevice(t, sys, "b/c", "x:0")
	addDevice(t, sys, "d", "x:1")
	addDevice(t, sys, "e", "")
	got, err := ScanModaliases(sys)
	if err != nil {
		t.Fatalf("ScanModaliases: %v", err)
	}
	if diff := cmp.Diff([]string{"x:0", "x:1"}, got); diff != "" {
		t.Errorf("ScanModaliases (-want +got):\n%s", diff)
	}
}
