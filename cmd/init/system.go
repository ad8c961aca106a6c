package main

import (
	"errors"
	"fmt"
	"time"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/verity"
)

// The flags that pin the system partition's content and, for tests, name
// its slot. The image build (build/system.Cmdline) writes flagVerity into
// the unified kernel image's command line, never flagSystem: a signed
// image cannot be edited, and the same one boots from either slot, found
// by content (localstorage.MountMatchingSystem).
const (
	// flagSystem forces one slot, "cairn.system=a": a test, or a command
	// line written before slots were found by content.
	flagSystem = "cairn.system"
	// flagVerity holds the system image's verity parameters:
	// "cairn.verity=<root hash>,<salt>,<data blocks>,<hash offset>".
	flagVerity = "cairn.verity"
)

// systemFlags say what the system partition must hash to and, when the
// command line forces one, which slot to mount.
type systemFlags struct {
	// slot is the slot flagSystem forces; empty: the one whose content
	// matches verity.
	slot   localstorage.Slot
	verity verity.Params
	// err says why the command line names no usable system partition;
	// then the storage child mounts nothing.
	err error
}

// parseSystemFlags reads flagVerity and, if given, flagSystem from c.
func parseSystemFlags(c cmdline.Cmdline) systemFlags {
	var f systemFlags
	if s, ok := c.Lookup(flagSystem); ok {
		slot, err := localstorage.ParseSlot(s.Value)
		if err != nil {
			return systemFlags{err: fmt.Errorf("when reading %s: %w", flagSystem, err)}
		}
		f.slot = slot
	}
	v, ok := c.Lookup(flagVerity)
	if !ok {
		return systemFlags{err: fmt.Errorf("the command line has no %s=: no system slot can be verified", flagVerity)}
	}
	p, err := verity.ParseParams(v.Value)
	if err != nil {
		return systemFlags{err: fmt.Errorf("when reading %s: %w", flagVerity, err)}
	}
	f.verity = p
	return f
}

// mountSystem mounts the system slot whose content matches the command
// line's root hash, or the slot the command line forces. What no retry
// mends, a command line without the system flags or no slot matching,
// is said once on the consoles and not tried again: the error goes back
// to the supervisor on every run, which restarts the child after a
// growing pause, while the node stays up to be powered off. A slot that
// could not be read at all is tried again, with that pause.
func (s *storage) mountSystem(log logtree.LeveledLogger) error {
	if s.systemFailure != nil {
		return s.systemFailure
	}
	sys := s.system
	if sys.err != nil {
		s.systemFailure = fmt.Errorf("when mounting the system partition: %w", sys.err)
		s.printf("no verified system partition: %v", sys.err)
		return s.systemFailure
	}
	var m localstorage.SystemMount
	var err error
	if sys.slot != "" {
		m, err = s.disks.MountSystem(sys.slot, sys.verity)
		if errors.Is(err, localstorage.ErrSystemCorrupt) {
			m.Passed = []localstorage.PassedSlot{{Slot: sys.slot, Err: err}}
		}
	} else {
		m, err = s.disks.MountMatchingSystem(sys.verity, s.firmwareSlot(log))
	}
	lasting := errors.Is(err, localstorage.ErrSystemCorrupt) || errors.Is(err, localstorage.ErrNoSystem)
	if err != nil && !lasting {
		return fmt.Errorf("when mounting the system partition: %w", err)
	}
	if err != nil {
		s.systemFailure = err
	}
	for _, ps := range m.Passed {
		if errors.Is(ps.Err, localstorage.ErrSystemCorrupt) {
			s.printf("system partition %s is corrupt: it does not match root hash %x; not using it", ps.Slot, sys.verity.RootHash)
		}
		log.Infof("Not using system slot %s: %v", ps.Slot, ps.Err)
	}
	if err != nil {
		if sys.slot == "" {
			s.printf("no verified system partition: %v", err)
		}
		if lasting && s.trialBoot && s.reboot != nil {
			s.printf("the firmware booted this image once, for a trial, and its system slot cannot be used: rebooting into the default slot")
			s.reboot()
		}
		return err
	}
	s.printf("system partition %s mounted at %s (verity %v, mount %v)",
		m.Slot, s.systemRoot, m.Verity.Round(10*time.Microsecond), m.Mount.Round(10*time.Microsecond))
	log.Infof("System partition %s (%s) verified against root hash %x", m.Slot, m.Partition, sys.verity.RootHash)
	if s.booted != nil {
		booted := m.BootedSystem
		s.booted.Set(&booted)
	}
	return nil
}

// firmwareSlot is the slot whose unified kernel image the firmware booted
// (node/update.Firmware.Booted), or "" when it booted another image or
// cannot say.
func (s *storage) firmwareSlot(log logtree.LeveledLogger) localstorage.Slot {
	if s.firmware == nil {
		return ""
	}
	slot, isDefault, ok, err := s.firmware.Booted()
	if err != nil {
		log.Warningf("Cannot tell which image the firmware booted: %v", err)
		return ""
	}
	if !ok {
		return ""
	}
	how := "once (BootNext), for a trial"
	if isDefault {
		how = "as its default"
	}
	s.trialBoot = !isDefault
	log.Infof("The firmware booted slot %s's unified kernel image %s", slot, how)
	return slot
}
