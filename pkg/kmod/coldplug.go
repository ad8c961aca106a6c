package kmod

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxColdplugRounds bounds how often Coldplug scans sysfs. Each round goes
// one bus deeper (PCI ─▶ virtio ─▶ input ...); real machines settle in three
// or four.
const maxColdplugRounds = 8

// Coldplug loads the modules for the devices the kernel has found, given
// the sysfs device tree (normally /sys/devices). It reads every modalias
// below it, loads the modules whose aliases match, and scans again while
// the previous round loaded something and brought new modaliases, as a
// freshly loaded bus driver adds devices of its own.
//
// A module that fails to load is logged and skipped. Coldplug returns an
// error only when sysfs cannot be read at all or ctx is done.
func (l *Loader) Coldplug(ctx context.Context, sysDevices string) error {
	seen := make(map[string]bool)
	for range maxColdplugRounds {
		aliases, err := ScanModaliases(sysDevices)
		if err != nil {
			return err
		}
		before := len(l.loaded)
		fresh := 0
		for _, a := range aliases {
			if seen[a] {
				continue
			}
			seen[a] = true
			fresh++
			for _, m := range l.index.Aliases.Match(a) {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("coldplug stopped: %w", err)
				}
				// Failures are logged by Load and never fatal here.
				_ = l.Load(m)
			}
		}
		if fresh == 0 || len(l.loaded) == before {
			return nil
		}
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
