package main

import (
	"context"
	"fmt"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/modules"
	"cairn.dev/cairn/node/testhooks"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/verity"
)

// nodeStorage is what the storage child does to the disks: the methods of
// *localstorage.Storage, and a fake in tests.
type nodeStorage interface {
	MountSystem(slot localstorage.Slot, p verity.Params) (localstorage.SystemMount, error)
	MountMatchingSystem(p verity.Params, first localstorage.Slot) (localstorage.SystemMount, error)
	MountESP() error
	MountEphemeral() error
	MountNew(ctx context.Context, nodeKey, clusterKey []byte) error
	MountExisting(nodeKey, clusterKey []byte) error
}

// storage is the storage child: it loads the disks' modules, mounts the
// verified system partition, loads the modules it carries, mounts the ESP
// and /ephemeral (and, in test images, what the test hooks ask for). It
// remembers what it mounted and loaded, so that a restart by the
// supervisor after an error goes on from where the last run stopped
// instead of mounting twice.
type storage struct {
	disks nodeStorage
	// printf writes a phase line to the consoles.
	printf func(format string, args ...any)
	// espCairn is the ESP's cairn/ directory, dataRoot the data
	// partition's mount point, systemRoot the system partition's.
	espCairn, dataRoot, systemRoot string
	// system names the system image's verity parameters and maybe a
	// slot, from the command line.
	system systemFlags
	// booted is set to the system slot mounted, before mounted is set:
	// the role server reports it, an installer writes the other slot.
	// Nil in tests that do not care.
	booted event.Value[*localstorage.BootedSystem]
	// firmware says which slot's unified kernel image the firmware
	// booted; nil when the node cannot ask it (tests).
	firmware *update.Firmware
	// trialBoot is set when the firmware booted a slot's image once
	// (BootNext): a trial, which goes back to the default slot through
	// reboot when its system slot cannot be used.
	trialBoot bool
	reboot    func()
	// hooks are the storage child's test hooks (node/testhooks); they do
	// nothing in production builds, nor when zero.
	hooks testhooks.Storage
	// mounted is set to true once the system partition, the ESP and
	// /ephemeral are mounted: enrolment and the network wait for it, and
	// the data partition is made with the mkfs.xfs of /system. Nil in
	// tests that do not care.
	mounted event.Value[bool]

	// dataReady is set once the modules of the data partition are
	// loaded too, after mounted: enrolment waits for it before it mounts
	// the data partition. Nil in tests that do not care.
	dataReady event.Value[bool]
	// diskModules loads the modules the disks need, before anything is
	// mounted; systemModules loads the system partition's once it is
	// mounted, before the ESP; dataModules loads the data partition's
	// once the ESP is mounted (node/modules). Nil in tests that do not
	// care.
	diskModules, systemModules, dataModules func(ctx context.Context, log logtree.LeveledLogger) error
	// hotplug loads, from then on, the modules of devices that appear
	// later (node/modules): it runs once the modules above are loaded.
	// Nil in tests that do not care.
	hotplug func(ctx context.Context, log logtree.LeveledLogger, ready func()) error

	diskModulesLoaded, systemMounted, systemModulesLoaded, espMounted, ephemeralMounted, dataModulesLoaded bool
	// systemFailure is why the system partition cannot be mounted, when
	// trying again cannot change it.
	systemFailure error
}

// newStorage returns the storage child for the node's disks s, which sets
// booted to the system slot it mounted, and mounted once the system
// partition, the ESP and /ephemeral are mounted; reboot reboots through
// the firmware.
func newStorage(s *localstorage.Storage, fl flags, booted event.Value[*localstorage.BootedSystem], mounted, dataReady event.Value[bool], printf func(string, ...any), reboot func()) *storage {
	st := &storage{
		disks:      s,
		booted:     booted,
		mounted:    mounted,
		dataReady:  dataReady,
		printf:     printf,
		espCairn:   s.Root.ESP.Cairn.FullPath(),
		dataRoot:   s.Root.Data.FullPath(),
		systemRoot: s.Root.System.FullPath(),
		system:     fl.system,
		firmware:   &update.Firmware{Vars: s.EFIVars(), Path: s.ESPFile},
		reboot:     reboot,
	}
	st.hooks = fl.test.Storage(s, st.espCairn, st.dataRoot, printf)
	m := modules.NewSteps(s.Root.System.FullPath(), printf)
	st.diskModules, st.systemModules, st.dataModules = m.LoadDisks, m.LoadSystem, m.LoadData
	st.hotplug = m.Hotplug
	return st
}

// loadOnce runs the module step load, unless it is nil or done says that
// it ran already, and records that it ran.
func loadOnce(ctx context.Context, log logtree.LeveledLogger, done *bool, load func(context.Context, logtree.LeveledLogger) error) error {
	if *done || load == nil {
		return nil
	}
	if err := load(ctx, log); err != nil {
		return err
	}
	*done = true
	return nil
}

// run is the storage child's runnable. Errors go back to the supervisor,
// which runs it again after a backoff; nothing it does on a retry can
// destroy data.
func (s *storage) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if err := loadOnce(ctx, log, &s.diskModulesLoaded, s.diskModules); err != nil {
		return err
	}
	if !s.systemMounted {
		if err := s.mountSystem(log); err != nil {
			return err
		}
		s.systemMounted = true
	}
	if err := loadOnce(ctx, log, &s.systemModulesLoaded, s.systemModules); err != nil {
		return err
	}
	if !s.espMounted {
		if err := s.disks.MountESP(); err != nil {
			return fmt.Errorf("when mounting the ESP: %w", err)
		}
		s.espMounted = true
		log.Infof("ESP mounted")
	}
	if !s.ephemeralMounted {
		if err := s.disks.MountEphemeral(); err != nil {
			return fmt.Errorf("when mounting /ephemeral: %w", err)
		}
		s.ephemeralMounted = true
	}
	if s.mounted != nil {
		s.mounted.Set(true)
	}
	if err := loadOnce(ctx, log, &s.dataModulesLoaded, s.dataModules); err != nil {
		return err
	}
	if s.dataReady != nil {
		s.dataReady.Set(true)
	}
	if s.hotplug != nil {
		if err := supervisor.Run(ctx, "hotplug", s.runHotplug); err != nil {
			return fmt.Errorf("when starting hotplug: %w", err)
		}
	}
	if err := s.hooks.Run(ctx, log); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// runHotplug is the storage child's runnable that loads the modules of
// devices plugged in after boot.
func (s *storage) runHotplug(ctx context.Context) error {
	return s.hotplug(ctx, supervisor.Logger(ctx), func() { supervisor.Signal(ctx, supervisor.SignalHealthy) })
}
