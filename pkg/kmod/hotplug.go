package kmod

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Hotplug loads, until ctx is done, the modules for devices that appear
// after a coldplug: a USB stick plugged in asks for usb-storage, whose
// load then brings a SCSI disk that asks for sd_mod. served are the
// modaliases the coldplug served (Devices.Known once it returned); only
// the others that match accepts are served here. Each round opens a Loader
// with open, so that it knows what other processes loaded meanwhile and
// tries again what failed before, and asks devices again right after its
// loads, which bring devices of their own; otherwise it waits on the
// kernel's uevents (Devices.Wait), so a node whose devices do not change
// spends nothing on it. Each round that served devices is logged, with
// what it loaded; a module that fails to load is logged by its Loader and
// not returned. ready, when not nil, is called once, when Hotplug first
// waits. Hotplug returns an error when it cannot look at the devices or
// wait for them, or ctx's.
func Hotplug(ctx context.Context, devices *Devices, served []string, accepts func(modalias string) bool, open func() (*Loader, error), log Logger, ready func()) error {
	done := make(map[string]bool, len(served))
	for _, a := range served {
		done[a] = true
	}
	for {
		aliases, err := devices.Modaliases()
		if err != nil {
			return err
		}
		var fresh []string
		for _, a := range aliases {
			if !done[a] && (accepts == nil || accepts(a)) {
				fresh = append(fresh, a)
			}
		}
		if len(fresh) == 0 {
			if ready != nil {
				ready()
				ready = nil
			}
			if err := devices.Wait(ctx); err != nil {
				return err
			}
			continue
		}
		l, err := open()
		if err != nil {
			return fmt.Errorf("when serving new devices: %w", err)
		}
		var want []string
		for _, a := range fresh {
			for _, m := range l.Match(a) {
				if !slices.Contains(want, m) {
					want = append(want, m)
				}
			}
		}
		if err := l.LoadAll(ctx, want); err != nil {
			return err
		}
		for _, a := range fresh {
			done[a] = true
		}
		log.Infof("hotplug: %d new devices (%s), %d modules loaded: %s",
			len(fresh), shortList(fresh, 4), len(l.Loaded()), strings.Join(l.Loaded(), ", "))
	}
}

// shortList joins the first n of s, and says how many more there are.
func shortList(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], ", "), len(s)-n)
}
