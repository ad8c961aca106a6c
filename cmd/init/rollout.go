package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// trialPushWait is how long the node waits, before it reboots for a trial,
// for the curator leader to hear that the trial begins. The reboot does
// not depend on it: a leader that did not hear sees the node come back on
// the new release, or on the old one with the trial failed.
const trialPushWait = 10 * time.Second

// rolloutFollower carries out the releases that cluster rollouts give the
// node (roleserve's DesiredRelease), once per rollout and boot, and tells
// the role server how it goes, for the curator leader:
//
//	desired release of rollout R
//	  │ runs it already ──────────────────────────────▶ DONE
//	  │ cannot install, or cannot boot a trial ───────▶ FAILED (why)
//	  │ this boot rolled back from its trial ─────────▶ FAILED (the trial's reason)
//	  ▼
//	INSTALLING: Install, Activate ─── error ───▶ FAILED (which step, why)
//	  ▼
//	TRIAL: reboot through the firmware into the other slot
//	  ▼
//	the next boot judges the trial (update.Installer.JudgeBoot) and meets
//	R again: it runs the release (DONE), or rolled back (FAILED)
//
// A desired release to be staged only (the node's turn has not come) is
// installed, but not booted: STAGED. At its turn the same release comes
// without stage_only, and the node boots the slot it staged without
// installing it again. A staging's statuses say stage_only, so that the
// leader never takes them for the turn's.
//
// A rollout it acted on is never acted on again in the same boot (its
// staging and its turn are acted on once each): a failure is reported
// once, and the node waits for another rollout.
type rolloutFollower struct {
	// desired is the node's desired release, nil when it has none.
	desired event.Watchable[*api.DesiredRelease]
	// report tells the role server the node's update status.
	report func(*api.UpdateStatus)
	// pushed is the update status that last reached the curator leader.
	pushed event.Watchable[*api.UpdateStatus]
	// installer installs releases; nil when cannot says why there is
	// none.
	installer *update.Installer
	// cannot says why the node cannot install a release and boot it for
	// a trial; nil when it can.
	cannot error
	// running is the version the node runs.
	running string
	// reboot reboots the node through the firmware.
	reboot func()
	// printf writes a line on the consoles.
	printf func(string, ...any)

	// rolledBack is set when this boot followed a trial of the other
	// slot that failed, until a desired release was answered: a trial
	// that failed answers the rollout that asked for it, but not a later
	// one that installs the same release again (after the owner cleared
	// it as bad).
	rolledBack bool
	// acted holds the rollouts whose desired release this boot acted on,
	// by actedKey.
	acted map[string]bool
}

// actedKey names what the node does about d once per boot: a rollout's
// staging apart from its turn.
func actedKey(d *api.DesiredRelease) string {
	if d.StageOnly {
		return d.RolloutId + " staging"
	}
	return d.RolloutId
}

func (f *rolloutFollower) run(ctx context.Context) error {
	w := f.desired.Watch()
	defer w.Close()
	for {
		d, err := w.Get(ctx, event.NotNil[*api.DesiredRelease]())
		if err != nil {
			return err
		}
		if f.acted[actedKey(d)] {
			continue
		}
		if f.acted == nil {
			f.acted = make(map[string]bool)
		}
		f.acted[actedKey(d)] = true
		if err := f.carryOut(ctx, d); err != nil {
			return err
		}
	}
}

// carryOut acts on d. It returns nil when the node is done with d, and
// ctx's error when ctx ends: when the node goes down, after it asked for
// the reboot of a trial or not.
func (f *rolloutFollower) carryOut(ctx context.Context, d *api.DesiredRelease) error {
	var other update.SlotInfo
	if f.installer != nil {
		slots, err := f.installer.Slots()
		if err != nil {
			// The install writes the record anew.
			supervisor.Logger(ctx).Warningf("The record of the system slots is unreadable: %v", err)
		}
		for _, s := range slots {
			if !s.Running {
				other = s
			}
		}
	}
	decision := decideRollout(releaseState{running: f.running, cannot: f.cannot, other: other, rolledBack: f.rolledBack && !d.StageOnly}, d)
	if !d.StageOnly {
		// A staging does not answer the rollout that asked for the trial.
		f.rolledBack = false
	}
	f.tell(decision)
	if decision.Phase != api.UpdatePhase_UPDATE_PHASE_INSTALLING {
		return nil
	}
	slot := other.Slot
	if staged(other, d) {
		supervisor.Logger(ctx).Infof("Rollout %s: slot %s holds release %s (%s), staged already", d.RolloutId, slot, d.Version, other.Digest)
	} else {
		installed, err := f.install(ctx, d)
		if err != nil {
			if ctx.Err() != nil {
				// The node goes down: the next boot acts on d again.
				return ctx.Err()
			}
			f.tell(updateStatus(d, api.UpdatePhase_UPDATE_PHASE_FAILED, err.Error()))
			return nil
		}
		slot = installed
	}
	if d.StageOnly {
		f.tell(updateStatus(d, api.UpdatePhase_UPDATE_PHASE_STAGED, ""))
		return nil
	}
	if _, err := f.installer.Activate(time.Duration(d.TrialDeadlineSeconds) * time.Second); err != nil {
		f.tell(updateStatus(d, api.UpdatePhase_UPDATE_PHASE_FAILED,
			fmt.Sprintf("when setting up the trial boot of release %s in slot %s: %v", d.Version, slot, err)))
		return nil
	}
	trial := updateStatus(d, api.UpdatePhase_UPDATE_PHASE_TRIAL, "")
	f.printf("rollout %s: rebooting into slot %s for the trial of release %s", d.RolloutId, slot, d.Version)
	f.report(trial)
	f.waitPushed(ctx, trial)
	f.reboot()
	<-ctx.Done()
	return ctx.Err()
}

// staged says whether slot other holds d's release, staged and not yet
// tried: written and read back by an earlier install, of the manifest d
// pins by digest.
func staged(other update.SlotInfo, d *api.DesiredRelease) bool {
	_, digest, ok := strings.Cut(d.Reference, "@")
	return ok && other.State == private.SystemSlots_Slot_STAGED && other.Digest == digest && sameVersion(other.Version, d.Version)
}

// install installs d into the other slot; it returns the slot, or an
// error that says which step failed.
func (f *rolloutFollower) install(ctx context.Context, d *api.DesiredRelease) (localstorage.Slot, error) {
	log := supervisor.Logger(ctx)
	res, err := f.installer.Install(ctx, update.Request{Reference: d.Reference, AllowDowngrade: d.AllowDowngrade}, func(p update.Progress) {
		// Each step once, and the bytes a step moves at its start and
		// end only.
		if p.Milestone() {
			log.Infof("Rollout %s: %s", d.RolloutId, p)
		}
	})
	if err != nil {
		return "", fmt.Errorf("when installing release %s: %w", d.Version, err)
	}
	if !sameVersion(res.Version, d.Version) {
		return "", fmt.Errorf("the rollout names release %s, but the release's signed metadata says %s", d.Version, res.Version)
	}
	return res.Slot, nil
}

// waitPushed waits a little for the curator leader to hear st.
func (f *rolloutFollower) waitPushed(ctx context.Context, st *api.UpdateStatus) {
	wctx, cancel := context.WithTimeout(ctx, trialPushWait)
	defer cancel()
	w := f.pushed.Watch()
	defer w.Close()
	if _, err := w.Get(wctx, event.Filter(func(u *api.UpdateStatus) bool { return proto.Equal(u, st) })); err != nil && ctx.Err() == nil {
		supervisor.Logger(ctx).Warningf("Rebooting for the trial of %s, which the curator leader did not hear of within %v", st.Version, trialPushWait)
	}
}

// tell puts st on the consoles and reports it to the role server.
func (f *rolloutFollower) tell(st *api.UpdateStatus) {
	f.say(st)
	f.report(st)
}

// say puts st on the consoles in words; a trial says more, so carryOut
// says it.
func (f *rolloutFollower) say(st *api.UpdateStatus) {
	switch st.Phase {
	case api.UpdatePhase_UPDATE_PHASE_DONE:
		f.printf("rollout %s: this node runs release %s", st.RolloutId, st.Version)
	case api.UpdatePhase_UPDATE_PHASE_INSTALLING:
		if st.StageOnly {
			f.printf("rollout %s: staging release %s ahead of this node's turn", st.RolloutId, st.Version)
		} else {
			f.printf("rollout %s: installing release %s", st.RolloutId, st.Version)
		}
	case api.UpdatePhase_UPDATE_PHASE_STAGED:
		f.printf("rollout %s: release %s is staged; this node boots it at its turn", st.RolloutId, st.Version)
	case api.UpdatePhase_UPDATE_PHASE_FAILED:
		f.printf("rollout %s: release %s failed: %s", st.RolloutId, st.Version, st.Reason)
	}
}

// releaseState is what the node knows of its own releases when a desired
// release comes.
type releaseState struct {
	// running is the version the node runs.
	running string
	// cannot says why the node cannot install a release and boot it for
	// a trial; nil when it can.
	cannot error
	// other is the system slot the node does not run, as the installer
	// records it.
	other update.SlotInfo
	// rolledBack is set when this boot followed a failed trial of other
	// that no desired release was answered with yet.
	rolledBack bool
}

// decideRollout says what the node does about desired release d, as the
// status it reports first: DONE or FAILED, and nothing more to do, or
// INSTALLING, and it installs d.
func decideRollout(s releaseState, d *api.DesiredRelease) *api.UpdateStatus {
	switch {
	case sameVersion(s.running, d.Version):
		return updateStatus(d, api.UpdatePhase_UPDATE_PHASE_DONE, "")
	case s.cannot != nil:
		return updateStatus(d, api.UpdatePhase_UPDATE_PHASE_FAILED, s.cannot.Error())
	case s.rolledBack && s.other.State == private.SystemSlots_Slot_BAD && sameVersion(s.other.Version, d.Version):
		return updateStatus(d, api.UpdatePhase_UPDATE_PHASE_FAILED,
			fmt.Sprintf("its trial in slot %s failed, and the node rolled back to %s: %s", s.other.Slot, s.running, s.other.Reason))
	}
	return updateStatus(d, api.UpdatePhase_UPDATE_PHASE_INSTALLING, "")
}

// updateStatus is the status of the node's work on d.
func updateStatus(d *api.DesiredRelease, phase api.UpdatePhase, reason string) *api.UpdateStatus {
	return &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: phase, Reason: reason, StageOnly: d.StageOnly}
}

// sameVersion says whether two versions are the same release version
// ("v1.2.3" is "1.2.3"); a version that does not parse is the same only
// as the same text.
func sameVersion(a, b string) bool {
	va, errA := release.ParseVersion(a)
	vb, errB := release.ParseVersion(b)
	if errA != nil || errB != nil {
		return a == b
	}
	return va.Compare(vb) == 0
}
