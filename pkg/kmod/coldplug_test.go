package kmod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	if err := l.Coldplug(context.Background(), ScanDevices(sys), nil); err != nil {
		t.Fatalf("Coldplug: %v", err)
	}
	// Modules load at once, so only the dependencies and the devices that
	// loads bring fix an order.
	want := []string{"button", "evdev", "failover", "net_failover", "virtio", "virtio_net", "virtio_pci", "virtio_pci_modern_dev", "virtio_ring"}
	got := l.Loaded()
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if diff := cmp.Diff(want, sorted); diff != "" {
		t.Errorf("Coldplug loaded (-want +got):\n%s", diff)
	}
	for _, before := range [][2]string{
		{"virtio_ring", "virtio_pci"}, {"virtio", "virtio_pci"}, {"virtio_pci_modern_dev", "virtio_pci"},
		{"failover", "net_failover"}, {"net_failover", "virtio_net"},
		{"virtio_pci", "virtio_net"}, {"button", "evdev"}, // the devices they bring
	} {
		if slices.Index(got, before[0]) > slices.Index(got, before[1]) {
			t.Errorf("Coldplug loaded %s after %s: %q", before[0], before[1], got)
		}
	}
}

// TestColdplugMatch: the devices' modaliases and the CPU's are served
// apart, each by its own pass.
func TestColdplugMatch(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	addDevice(t, sys, "system/cpu", "cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0001,0099")
	k := &fakeKernel{}
	l := newTestLoader(t, k, &fakeLog{})
	if err := l.Coldplug(context.Background(), ScanDevices(sys), func(a string) bool { return !CPUModalias(a) }); err != nil {
		t.Fatalf("Coldplug(devices): %v", err)
	}
	if diff := cmp.Diff([]string{"button"}, l.Loaded()); diff != "" {
		t.Errorf("Coldplug(devices) loaded (-want +got):\n%s", diff)
	}
	if err := l.Coldplug(context.Background(), ScanDevices(sys), CPUModalias); err != nil {
		t.Fatalf("Coldplug(CPU): %v", err)
	}
	if diff := cmp.Diff([]string{"button", "aesni_intel"}, l.Loaded()); diff != "" {
		t.Errorf("Coldplug(CPU) loaded (-want +got):\n%s", diff)
	}
}

// TestColdplugNamed: named modules load along with what the devices ask
// for, each once.
func TestColdplugNamed(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	k := &fakeKernel{}
	l := newTestLoader(t, k, &fakeLog{})
	if err := l.Coldplug(context.Background(), ScanDevices(sys), nil, "evdev", "button", "evdev"); err != nil {
		t.Fatalf("Coldplug: %v", err)
	}
	got := l.Loaded()
	slices.Sort(got)
	if diff := cmp.Diff([]string{"button", "evdev"}, got); diff != "" {
		t.Errorf("Coldplug loaded (-want +got):\n%s", diff)
	}
}

// TestColdplugDoesNotWaitForSlowLoads: a driver that takes long to load
// does not hold back the devices another load brought.
func TestColdplugDoesNotWaitForSlowLoads(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "pci0000:00/0000:00:02.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	release := make(chan struct{})
	k := &fakeKernel{}
	k.onLoad = func(name string) {
		switch name {
		case "virtio_pci":
			addDevice(t, sys, "pci0000:00/0000:00:02.0/virtio0", "virtio:d00000001v00001AF4")
		case "virtio_net":
			close(release) // button's load is still running
		}
	}
	l := newTestLoader(t, k, &fakeLog{})
	slow := l.load
	l.load = func(f *os.File, params string, flags int) error {
		if strings.HasSuffix(f.Name(), "button.ko") {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
				return errors.New("virtio_net was not loaded while button was")
			}
		}
		return slow(f, params, flags)
	}
	if err := l.Coldplug(context.Background(), ScanDevices(sys), nil); err != nil {
		t.Fatalf("Coldplug: %v", err)
	}
	if got := l.Loaded(); !slices.Contains(got, "button") || !slices.Contains(got, "virtio_net") {
		t.Errorf("Coldplug loaded %q, want button and virtio_net", got)
	}
}

// TestLoadConcurrent: callers that load modules sharing dependencies at
// the same time load each module once, and every module after what it
// needs.
func TestLoadConcurrent(t *testing.T) {
	for range 20 {
		k := &fakeKernel{}
		l := newTestLoader(t, k, &fakeLog{})
		var wg sync.WaitGroup
		for _, m := range []string{"virtio_net", "virtio_pci", "net_failover", "virtio_net", "button"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := l.Load(m); err != nil {
					t.Errorf("Load(%s): %v", m, err)
				}
			}()
		}
		wg.Wait()
		k.mu.Lock()
		loaded := slices.Clone(k.loaded)
		k.mu.Unlock()
		for i, m := range loaded {
			if slices.Contains(loaded[i+1:], m) {
				t.Fatalf("%s was handed to the kernel twice: %q", m, loaded)
			}
		}
		if slices.Index(loaded, "failover") > slices.Index(loaded, "net_failover") ||
			slices.Index(loaded, "net_failover") > slices.Index(loaded, "virtio_net") {
			t.Fatalf("a module was loaded before what it needs: %q", loaded)
		}
	}
}

func TestColdplugMissingSysfs(t *testing.T) {
	l := newTestLoader(t, &fakeKernel{}, &fakeLog{})
	if err := l.Coldplug(context.Background(), ScanDevices(filepath.Join(t.TempDir(), "nope")), nil); err == nil {
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
	if err := l.Coldplug(ctx, ScanDevices(sys), nil); err == nil {
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
