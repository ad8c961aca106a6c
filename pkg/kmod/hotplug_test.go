package kmod

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHotplug: after a coldplug, Hotplug loads nothing for the devices the
// coldplug served, loads the modules of a device announced later and of
// the device that load brings in turn, and returns when its context ends.
// A round whose Loader cannot be opened is an error that leaves its
// devices to the next run.
func TestHotplug(t *testing.T) {
	sys := t.TempDir()
	addDevice(t, sys, "LNXSYSTM:00/LNXPWRBN:00", "acpi:LNXPWRBN:")
	events := &fakeEvents{queue: make(chan struct{}, 1)}
	devices := &Devices{dir: sys, events: events}
	if _, err := devices.Modaliases(); err != nil {
		t.Fatal(err)
	}
	served := devices.Known() // the coldplug's, whose button is not loaded again
	k := &fakeKernel{}
	k.onLoad = func(name string) {
		if name == "virtio_net" {
			// A driver's load adds a device of its own.
			events.add("input:b0019v0000p0001e0000-e0,1,k74,ramlsfw")
		}
	}
	log := &fakeLog{}
	idx, err := Open(writeModuleDir(t, testDep, testAlias, testBuiltin))
	if err != nil {
		t.Fatal(err)
	}
	open := func() (*Loader, error) {
		return NewLoader(idx, WithLoadFunc(k.load), WithLogger(log)), nil
	}

	// First a round whose Loader cannot be opened.
	broken := func() (*Loader, error) { return nil, errors.New("no module index") }
	events.add("virtio:d00000001v00001AF4")
	err = Hotplug(context.Background(), devices, served, nil, broken, log, nil)
	if err == nil || !strings.Contains(err.Error(), "no module index") {
		t.Fatalf("Hotplug with a broken index: %v, want its error", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	ready := make(chan struct{})
	go func() { result <- Hotplug(ctx, devices, served, nil, open, log, func() { close(ready) }) }()
	loaded := func() []string {
		k.mu.Lock()
		defer k.mu.Unlock()
		return slices.Clone(k.loaded)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(loaded(), "evdev") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := loaded()
	slices.Sort(got)
	if want := []string{"evdev", "failover", "net_failover", "virtio", "virtio_net", "virtio_ring"}; !slices.Equal(got, want) {
		t.Errorf("Hotplug loaded %v, want %v (the device the failed round left, and the one its load added)", got, want)
	}
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Error("Hotplug did not say it was ready once it waited")
	}
	if !log.has("hotplug: 1 new devices (virtio:d00000001v00001AF4)") {
		t.Errorf("Hotplug did not log the round: %q", log.lines)
	}

	// Later devices are served as they come, without a walk of sysfs.
	events.add("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	deadline = time.Now().Add(10 * time.Second)
	for !slices.Contains(loaded(), "virtio_pci") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(loaded(), "virtio_pci") {
		t.Errorf("Hotplug did not serve a device added later: loaded %v", loaded())
	}
	if scans, _, _ := devices.Stats(); scans != 1 {
		t.Errorf("Hotplug walked sysfs %d times in all, want only the first walk", scans)
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Hotplug returned %v when its context ended, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Hotplug did not return when its context ended")
	}
	if slices.Contains(loaded(), "button") {
		t.Error("Hotplug loaded the button, which the coldplug served")
	}
}
