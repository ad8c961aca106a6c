package kmod

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxColdplugScans bounds how often Coldplug asks its Devices for the
// modaliases. It asks again whenever loads finish, since a freshly loaded
// bus driver adds devices of its own (PCI ─▶ virtio ─▶ input ...);
// machines settle in a few rounds.
const maxColdplugScans = 16

// coldplugParallel bounds how many modules Coldplug loads at once. Most of
// a load is the kernel's own work on one CPU; what overlaps is waiting, as
// a SATA controller probing its ports while a virtio disk appears.
const coldplugParallel = 8

// CPUModalias reports whether modalias is the CPU's, which lists its
// features and which the modules of accelerated algorithms match.
func CPUModalias(modalias string) bool { return strings.HasPrefix(modalias, "cpu:") }

// Coldplug loads the modules for the devices the kernel has found, which
// devices knows (WatchDevices, or ScanDevices over a sysfs tree). It
// loads the modules whose aliases match their modaliases, several at
// once. Whenever loads finish it asks devices again and starts loading for
// the devices they brought, without waiting for the loads still running:
// a driver that takes long to probe holds back only what needs it. It
// returns once no load runs and devices brings nothing new.
//
// With match set, only the modaliases it accepts are served (CPUModalias
// tells those of the CPU's features from the devices'); with match
// returning false for all, no device is. The modules named are loaded
// along, whether or not a device asks for them.
//
// A module that fails to load is logged and skipped. Coldplug returns an
// error only when sysfs cannot be read at all or ctx is done; it waits for
// the loads it started before it returns either way.
func (l *Loader) Coldplug(ctx context.Context, devices *Devices, match func(modalias string) bool, named ...string) error {
	seen := make(map[string]bool)
	started := make(map[string]bool)
	// Room for every module, so that no load waits to say it ended.
	finished := make(chan struct{}, len(l.index.Modules)+len(named))
	slots := make(chan struct{}, coldplugParallel)
	cpuSlot := make(chan struct{}, 1)
	running := 0
	// What finding the devices cost is said once Coldplug ends: under
	// software emulation, a walk of sysfs is a tenth of a second or more.
	// The time is the walks' wall time, which grows with the loads that
	// run beside them.
	scans0, scanning0, events0 := devices.Stats()
	defer func() {
		scans, scanning, events := devices.Stats()
		l.log.Infof("coldplug served %d modaliases: %d walks of sysfs (%v), %d devices from uevents",
			len(seen), scans-scans0, (scanning - scanning0).Round(time.Millisecond), events-events0)
	}()
	var wg sync.WaitGroup
	defer wg.Wait() // before the line above: the loads end first
	start := func(m string, slot chan struct{}) {
		started[m] = true
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			slot <- struct{}{}
			_ = l.Load(m) // failures are logged by Load, never fatal here
			<-slot
			finished <- struct{}{}
		}()
	}
	for _, m := range named {
		if !started[m] {
			start(m, slots)
		}
	}
	for scan := 1; ; scan++ {
		aliases, err := devices.Modaliases()
		if err != nil {
			return err
		}
		for _, a := range aliases {
			if seen[a] || (match != nil && !match(a)) {
				continue
			}
			seen[a] = true
			for _, m := range l.index.Aliases.Match(a) {
				if started[m] {
					continue
				}
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("coldplug stopped: %w", err)
				}
				// The modules for CPU features (accelerated ciphers and
				// checksums) only compute: their load is the kernel's
				// self-tests of their algorithms. Loaded together they
				// would share the CPU and end later than one by one.
				if CPUModalias(a) {
					start(m, cpuSlot)
				} else {
					start(m, slots)
				}
			}
		}
		if running == 0 || scan == maxColdplugScans {
			return nil
		}
		// Wait for a load to end, then take every other that ended
		// meanwhile, so that one scan serves them all.
		select {
		case <-finished:
			running--
		case <-ctx.Done():
			return fmt.Errorf("coldplug stopped: %w", ctx.Err())
		}
		for more := true; more; {
			select {
			case <-finished:
				running--
			default:
				more = false
			}
		}
	}
}

// LoadAll loads the modules names, at most coldplugParallel at once, and
// returns when all are done. Failures are logged by Load and not returned;
// a ctx done stops it from starting more loads.
func (l *Loader) LoadAll(ctx context.Context, names []string) error {
	var wg sync.WaitGroup
	slots := make(chan struct{}, coldplugParallel)
	defer wg.Wait()
	for _, m := range names {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("coldplug stopped: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coldplug stopped: %w", ctx.Err())
		case slots <- struct{}{}:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			_ = l.Load(m)
		}()
	}
	return nil
}

// ScanModaliases returns the distinct, non-empty contents of every file
// named modalias below dir, sorted. Files that vanish or cannot be read
// while it walks (devices come and go) are skipped.
func ScanModaliases(dir string) ([]string, error) {
	set := make(map[string]bool)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil
		}
		if d.Name() != "modalias" || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if a := strings.TrimSpace(string(b)); a != "" {
			set[a] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("when scanning %s for modaliases: %w", dir, err)
	}
	aliases := make([]string, 0, len(set))
	for a := range set {
		aliases = append(aliases, a)
	}
	slices.Sort(aliases)
	return aliases, nil
}
