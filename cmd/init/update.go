package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// installer is the node's installer of releases, or why it has none.
type installer struct {
	i   *update.Installer
	err error
}

// updateRunnable is the update child. Once the storage child has mounted
// the system slot and the ESP, it makes the node's installer
// (node/update), once per boot, and hands it to node management through
// out; then it judges this boot (update.Installer.JudgeBoot): a trial of
// the other slot that never proved itself is recorded bad, and a trial
// boot of this slot waits for the role server's health, then becomes the
// firmware's default, or reboots through the firmware into the last good
// slot. From then on it carries out the releases cluster rollouts give
// the node (rolloutFollower), and tells the role server how it goes.
func updateRunnable(st *localstorage.Storage, booted event.Watchable[*localstorage.BootedSystem], mounted event.Watchable[bool], rs *roleserve.Service, out event.Value[*installer], request func(action), printf func(string, ...any)) supervisor.Runnable {
	c := &updateChild{st: st, booted: booted, mounted: mounted, rs: rs, out: out, request: request, printf: printf}
	return c.run
}

// updateChild is the update child's state, kept across its restarts: the
// installer and the judgement of this boot are made once per boot, and a
// rollout is acted on once per boot.
type updateChild struct {
	st      *localstorage.Storage
	booted  event.Watchable[*localstorage.BootedSystem]
	mounted event.Watchable[bool]
	rs      *roleserve.Service
	out     event.Value[*installer]
	request func(action)
	printf  func(string, ...any)

	// made is the installer, or why there is none.
	made *installer
	// judged is set once JudgeBoot judged this boot.
	judged bool
	// follow acts on the node's desired releases.
	follow *rolloutFollower
}

func (c *updateChild) run(ctx context.Context) error {
	if err := waitMounted(ctx, c.mounted); err != nil {
		return err
	}
	if c.made == nil {
		i, err := newInstaller(c.st, c.booted, c.rs.ClusterConfiguration)
		c.made = &installer{i: i, err: err}
		c.out.Set(c.made)
		if err != nil {
			supervisor.Logger(ctx).Warningf("This node cannot install updates: %v", err)
		}
	}
	if c.follow == nil {
		c.follow = &rolloutFollower{
			desired:   c.rs.DesiredRelease(),
			report:    c.rs.SetUpdateStatus,
			pushed:    c.rs.UpdatePushed(),
			installer: c.made.i,
			cannot:    cannotTry(c.made),
			running:   version(),
			reboot:    func() { c.request(firmwareReboot) },
			printf:    c.printf,
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	if c.made.err == nil && !c.judged {
		rebooting := false
		v, err := c.made.i.JudgeBoot(ctx, healthWait(c.rs.Health()), func() {
			rebooting = true
			c.request(firmwareReboot)
		}, c.printf)
		if err != nil {
			return fmt.Errorf("when judging this boot's system slot: %w", err)
		}
		if rebooting {
			// A trial that failed: nothing more to do in this boot.
			<-ctx.Done()
			return ctx.Err()
		}
		if v.RolledBack != "" {
			supervisor.Logger(ctx).Warningf("%s", v.RolledBack)
		}
		c.judged, c.follow.rolledBack = true, v.RolledBack != ""
	}
	return c.follow.run(ctx)
}

// cannotTry says why the node cannot install a release and boot it for a
// trial, or nil.
func cannotTry(made *installer) error {
	if made.err != nil {
		return fmt.Errorf("this node cannot install releases: %w", made.err)
	}
	if err := made.i.CanTry(); err != nil {
		return fmt.Errorf("this node cannot boot a release for a trial: %w", err)
	}
	return nil
}

// healthWait waits on the role server's health, for a trial boot.
func healthWait(health event.Watchable[roleserve.Health]) update.HealthWait {
	return func(ctx context.Context) (string, bool) {
		w := health.Watch()
		defer w.Close()
		waiting := "the role server to start"
		for {
			h, err := w.Get(ctx)
			if err != nil {
				return waiting, false
			}
			if h.Healthy {
				return "", true
			}
			waiting = h.Waiting
		}
	}
}

// newInstaller is the installer of releases (node/update) for node
// management, or an error saying why this node cannot install any: it did
// not boot from a verified system slot, or its own version is not a
// release version. booted is read as it is, without waiting: it is set,
// if ever, before the storage child says the ESP is mounted.
func newInstaller(st *localstorage.Storage, booted event.Watchable[*localstorage.BootedSystem], config func(context.Context) (*api.ClusterConfiguration, error)) (*update.Installer, error) {
	w := booted.Watch()
	defer w.Close()
	sys, err := w.Get(context.Background(), event.BacklogOnly[*localstorage.BootedSystem](), event.NotNil[*localstorage.BootedSystem]())
	if errors.Is(err, event.ErrBacklogDone) {
		return nil, errors.New("the node did not boot from a verified system slot")
	}
	if err != nil {
		return nil, err
	}
	v, err := release.ParseVersion(version())
	if err != nil {
		return nil, fmt.Errorf("the node's own version is not a release version: %w", err)
	}
	var fw *update.Firmware
	if _, err := os.Stat(st.EFIVars()); err == nil {
		fw = &update.Firmware{Vars: st.EFIVars(), Path: st.ESPFile}
	}
	return update.New(update.Config{
		Running:       sys.Slot,
		RunningVerity: sys.Params,
		Version:       v,
		Partition:     st.SystemPartition,
		Trust: func(ctx context.Context) (update.Trust, error) {
			c, err := config(ctx)
			if err != nil {
				return update.Trust{}, err
			}
			keys, err := clusterconfig.ReleaseKeys(c)
			if err != nil {
				return update.Trust{}, err
			}
			return update.Trust{Keys: keys, PlainHTTP: c.GetRegistries().GetPlainHttp()}, nil
		},
		Spool:    &st.Root.Data.Update,
		Slots:    &st.Root.ESP.Cairn.SystemSlots,
		UKIs:     &st.Root.ESP.EFI.Cairn,
		Fallback: &st.Root.ESP.EFI.Boot.BootX64,
		Firmware: fw,
	}), nil
}
