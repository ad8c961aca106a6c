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

// The flags that name the system partition's slot and pin its content,
// written by the image build (build/system.Cmdline) into the unified
// kernel image's command line.
const (
	// flagSystem names the slot to boot: "cairn.system=a".
	flagSystem = "cairn.system"
	// flagVerity holds the slot's verity parameters:
	// "cairn.verity=<root hash>,<salt>,<data blocks>,<hash offset>".
	flagVerity = "cairn.verity"
)

// systemFlags say which system slot to mount and what it must hash to.
type systemFlags struct {
	slot   localstorage.Slot
	verity verity.Params
	// err says why the command line names no usable system partition;
	// then the storage child mounts nothing.
	err error
}

// parseSystemFlags reads flagSystem and flagVerity from c.
func parseSystemFlags(c cmdline.Cmdline) systemFlags {
	s, ok := c.Lookup(flagSystem)
	if !ok {
		return systemFlags{err: fmt.Errorf("the command line has no %s=", flagSystem)}
	}
	slot, err := localstorage.ParseSlot(s.Value)
	if err != nil {
		return systemFlags{err: fmt.Errorf("when reading %s: %w", flagSystem, err)}
	}
	v, ok := c.Lookup(flagVerity)
	if !ok {
		return systemFlags{err: fmt.Errorf("the command line has no %s=: system slot %s cannot be verified", flagVerity, slot)}
	}
	p, err := verity.ParseParams(v.Value)
	if err != nil {
		return systemFlags{err: fmt.Errorf("when reading %s: %w", flagVerity, err)}
	}
	return systemFlags{slot: slot, verity: p}
}

// mountSystem mounts the system slot the command line names. What no
// retry mends, a command line without the system flags or a slot whose
// content does not match its root hash, is said once on the consoles and
// not tried again: the error goes back to the supervisor on every run,
// which restarts the child after a growing pause, while the node stays up
// to be powered off.
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
	m, err := s.disks.MountSystem(sys.slot, sys.verity)
	if errors.Is(err, localstorage.ErrSystemCorrupt) {
		s.systemFailure = err
		s.printf("system partition %s is corrupt: it does not match root hash %x; not using it", sys.slot, sys.verity.RootHash)
		return err
	}
	if err != nil {
		return fmt.Errorf("when mounting the system partition: %w", err)
	}
	s.printf("system partition %s mounted at %s (verity %v, mount %v)",
		sys.slot, s.systemRoot, m.Verity.Round(10*time.Microsecond), m.Mount.Round(10*time.Microsecond))
	log.Infof("System partition %s (%s) verified against root hash %x", sys.slot, m.Partition, sys.verity.RootHash)
	return nil
}
