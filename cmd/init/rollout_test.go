package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/node/update/updatetest"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

func TestDecideRollout(t *testing.T) {
	d := &api.DesiredRelease{RolloutId: "r1", Reference: "registry/cairn@sha256:ab", Version: "1.2.3"}
	status := func(phase api.UpdatePhase, reason string) *api.UpdateStatus {
		return &api.UpdateStatus{RolloutId: "r1", Version: "1.2.3", Phase: phase, Reason: reason}
	}
	bad := update.SlotInfo{Slot: localstorage.SlotB, State: private.SystemSlots_Slot_BAD, Version: "1.2.3", Reason: "not healthy within 10m0s: waiting for its etcd member to vote"}
	good := update.SlotInfo{Slot: localstorage.SlotB, State: private.SystemSlots_Slot_GOOD, Version: "1.2.1"}
	noFirmware := fmt.Errorf("this node cannot boot a release for a trial: %w", update.ErrNoFirmware)
	for _, tc := range []struct {
		name string
		s    releaseState
		want *api.UpdateStatus
	}{
		{"runs it", releaseState{running: "1.2.3", other: good}, status(api.UpdatePhase_UPDATE_PHASE_DONE, "")},
		{"runs it, spelt otherwise", releaseState{running: "v1.2.3"}, status(api.UpdatePhase_UPDATE_PHASE_DONE, "")},
		{"runs it, cannot install", releaseState{running: "1.2.3", cannot: noFirmware}, status(api.UpdatePhase_UPDATE_PHASE_DONE, "")},
		{"an older one", releaseState{running: "1.2.2", other: good}, status(api.UpdatePhase_UPDATE_PHASE_INSTALLING, "")},
		{"a newer one", releaseState{running: "1.3.0"}, status(api.UpdatePhase_UPDATE_PHASE_INSTALLING, "")},
		{"cannot install", releaseState{running: "1.2.2", cannot: noFirmware},
			status(api.UpdatePhase_UPDATE_PHASE_FAILED, "this node cannot boot a release for a trial: the node cannot set the firmware's boot entries")},
		{"rolled back from it", releaseState{running: "1.2.2", other: bad, rolledBack: true},
			status(api.UpdatePhase_UPDATE_PHASE_FAILED, "its trial in slot b failed, and the node rolled back to 1.2.2: not healthy within 10m0s: waiting for its etcd member to vote")},
		// A bad slot from an earlier boot is the failure of an earlier
		// rollout: the owner cleared the release, so it is tried again.
		{"bad from an earlier boot", releaseState{running: "1.2.2", other: bad}, status(api.UpdatePhase_UPDATE_PHASE_INSTALLING, "")},
		{"rolled back from another", releaseState{running: "1.2.2", other: update.SlotInfo{Slot: localstorage.SlotB, State: private.SystemSlots_Slot_BAD, Version: "1.2.4"}, rolledBack: true},
			status(api.UpdatePhase_UPDATE_PHASE_INSTALLING, "")},
		{"a dev build", releaseState{running: "dev-0123abc", cannot: errors.New("this node cannot install releases: the node's own version is not a release version")},
			status(api.UpdatePhase_UPDATE_PHASE_FAILED, "this node cannot install releases: the node's own version is not a release version")},
	} {
		if diff := cmp.Diff(tc.want, decideRollout(tc.s, d), protocmp.Transform()); diff != "" {
			t.Errorf("decideRollout(%+v, %v), %s (-want +got):\n%s", tc.s, d, tc.name, diff)
		}
	}
}

func TestSameVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"1.2.3", "1.2.3", true},
		{"v1.2.3", "1.2.3", true},
		{"1.2.3", "1.2.4", false},
		{"1.2.3-rc.1", "1.2.3", false},
		{"dev", "dev", true},
		{"dev", "1.2.3", false},
		{"", "", true},
	} {
		if got := sameVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("sameVersion(%q, %q) = %t, want %t", tc.a, tc.b, got, tc.want)
		}
	}
}

// rolloutNode is a node of updatetest under a rolloutFollower, with the
// role server's side of it: the desired release, and each update status
// reported, which reaches the curator at once.
type rolloutNode struct {
	desired memory.Value[*api.DesiredRelease]
	pushed  memory.Value[*api.UpdateStatus]

	mu       sync.Mutex
	statuses []*api.UpdateStatus
	lines    []string
	reboots  int
}

// follower returns a follower for a node that runs version with inst.
func (n *rolloutNode) follower(inst *update.Installer, version string) *rolloutFollower {
	return &rolloutFollower{
		desired: &n.desired,
		report: func(u *api.UpdateStatus) {
			n.mu.Lock()
			n.statuses = append(n.statuses, u)
			n.mu.Unlock()
			n.pushed.Set(u)
		},
		pushed:    &n.pushed,
		installer: inst,
		running:   version,
		reboot: func() {
			n.mu.Lock()
			n.reboots++
			n.mu.Unlock()
		},
		printf: func(f string, args ...any) {
			n.mu.Lock()
			n.lines = append(n.lines, fmt.Sprintf(f, args...))
			n.mu.Unlock()
		},
	}
}

// boot runs f until the test ends or the returned function is called,
// which waits for it to stop.
func (n *rolloutNode) boot(t *testing.T, f *rolloutFollower) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(fixture.Context(t))
	sup := supervisor.New(ctx, f.run)
	stop = func() {
		cancel()
		sup.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// waitPhase waits until the node reported phase, and returns the
// statuses reported until then.
func (n *rolloutNode) waitPhase(t *testing.T, rollout string, phase api.UpdatePhase) []*api.UpdateStatus {
	t.Helper()
	var got []*api.UpdateStatus
	fixture.Eventually(t, time.Minute, fmt.Sprintf("rollout %s %v", rollout, phase), func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		got = append([]*api.UpdateStatus(nil), n.statuses...)
		if len(got) == 0 || got[len(got)-1].RolloutId != rollout || got[len(got)-1].Phase != phase {
			return fmt.Errorf("statuses %v", got)
		}
		return nil
	})
	return got
}

// waitReboot waits until the node asked for one reboot, for a trial.
func (n *rolloutNode) waitReboot(t *testing.T) {
	t.Helper()
	fixture.Eventually(t, time.Minute, "the reboot for the trial", func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.reboots != 1 {
			return fmt.Errorf("%d reboots", n.reboots)
		}
		return nil
	})
}

// took returns what the node reported, said and rebooted since the last
// call.
func (n *rolloutNode) took() (statuses []*api.UpdateStatus, lines []string, reboots int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	statuses, lines, reboots = n.statuses, n.lines, n.reboots
	n.statuses, n.lines, n.reboots = nil, nil, 0
	return statuses, lines, reboots
}

// phases are the phases of statuses.
func phases(statuses []*api.UpdateStatus) []api.UpdatePhase {
	var p []api.UpdatePhase
	for _, s := range statuses {
		p = append(p, s.Phase)
	}
	return p
}

// TestRolloutTrialProvesItself walks a node of updatetest through a
// rollout step: it installs the desired release, reboots for its trial,
// and on the trial boot, once healthy, says it is done. The same rollout
// is not acted on twice in a boot.
func TestRolloutTrialProvesItself(t *testing.T) {
	const newer = "0.0.1"
	node := updatetest.New(t)
	r := node.Push(t, newer)
	n := &rolloutNode{}
	d := &api.DesiredRelease{RolloutId: "r1", Reference: r.Reference, Version: newer, TrialDeadlineSeconds: 60}
	n.desired.Set(d)
	stop := n.boot(t, n.follower(node.Installer, updatetest.Running))
	n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_TRIAL)
	n.waitReboot(t)
	stop()
	statuses, lines, _ := n.took()
	want := []api.UpdatePhase{api.UpdatePhase_UPDATE_PHASE_INSTALLING, api.UpdatePhase_UPDATE_PHASE_TRIAL}
	if diff := cmp.Diff(want, phases(statuses)); diff != "" {
		t.Errorf("phases reported (-want +got):\n%s", diff)
	}
	wantLines := []string{"rollout r1: installing release 0.0.1", "rollout r1: rebooting into slot b for the trial of release 0.0.1"}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("console lines (-want +got):\n%s", diff)
	}

	// The firmware boots slot b, which proves itself; the desired release
	// is still there.
	onB := node.Boot(t, localstorage.SlotB, newer)
	if v, err := onB.JudgeBoot(context.Background(), func(context.Context) (string, bool) { return "", true }, func() { t.Error("a healthy trial rebooted") }, t.Logf); err != nil || !v.Proved {
		t.Fatalf("JudgeBoot of the trial = %+v, %v; want proved", v, err)
	}
	n.boot(t, n.follower(onB, newer))
	n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_DONE)
	n.desired.Set(proto.Clone(d).(*api.DesiredRelease))
	n.desired.Set(nil)
	n.desired.Set(d)
	// A rollout the node has not acted on shows that the ones before
	// were taken in.
	n.desired.Set(&api.DesiredRelease{RolloutId: "r2", Reference: r.Reference, Version: newer})
	n.waitPhase(t, "r2", api.UpdatePhase_UPDATE_PHASE_DONE)
	statuses, lines, reboots := n.took()
	wantStatuses := []*api.UpdateStatus{
		{RolloutId: "r1", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_DONE},
		{RolloutId: "r2", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_DONE},
	}
	if diff := cmp.Diff(wantStatuses, statuses, protocmp.Transform()); diff != "" {
		t.Errorf("statuses on the trial boot (-want +got):\n%s", diff)
	}
	if reboots != 0 || len(lines) != 2 || lines[0] != "rollout r1: this node runs release 0.0.1" {
		t.Errorf("on the trial boot: %d reboots, console lines %q; want none, and that the node runs the release", reboots, lines)
	}
}

// TestRolloutTrialFails: the trial boot of the desired release never
// proves itself, the node comes back on slot a, and says once why the
// release failed. A later rollout of the same release installs it again;
// a failed install is reported once, with the step that failed.
func TestRolloutTrialFails(t *testing.T) {
	const newer = "0.0.1"
	node := updatetest.New(t)
	r := node.Push(t, newer)
	n := &rolloutNode{}
	d := &api.DesiredRelease{RolloutId: "r1", Reference: r.Reference, Version: newer}
	n.desired.Set(d)
	stop := n.boot(t, n.follower(node.Installer, updatetest.Running))
	n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_TRIAL)
	stop()
	n.took()

	// The trial boot hangs; the firmware's default boots slot a again.
	onA := node.Boot(t, localstorage.SlotA, updatetest.Running)
	v, err := onA.JudgeBoot(context.Background(), func(context.Context) (string, bool) { return "", true }, func() { t.Error("slot a rebooted") }, t.Logf)
	if err != nil || v.RolledBack == "" {
		t.Fatalf("JudgeBoot after the trial = %+v, %v; want rolled back", v, err)
	}
	f := n.follower(onA, updatetest.Running)
	f.rolledBack = true
	stop = n.boot(t, f)
	got := n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_FAILED)
	if len(got) != 1 || !strings.Contains(got[0].Reason, "its trial in slot b failed, and the node rolled back to "+updatetest.Running) {
		t.Errorf("statuses after the rollback = %v, want one FAILED that says the trial failed", got)
	}

	// The cluster trusts no release key any more: the next rollout of
	// the same release installs it again, and fails, once.
	n.took()
	node.Trust(false)
	r2 := &api.DesiredRelease{RolloutId: "r2", Reference: r.Reference, Version: newer}
	n.desired.Set(r2)
	got = n.waitPhase(t, "r2", api.UpdatePhase_UPDATE_PHASE_FAILED)
	if last := got[len(got)-1]; !strings.Contains(last.Reason, "when installing release 0.0.1") || !strings.Contains(last.Reason, update.ErrNoTrust.Error()) {
		t.Errorf("reason = %q, want the install's step and error", last.Reason)
	}
	n.desired.Set(proto.Clone(r2).(*api.DesiredRelease))
	node.Trust(true)
	n.desired.Set(&api.DesiredRelease{RolloutId: "r3", Reference: r.Reference, Version: newer})
	n.waitPhase(t, "r3", api.UpdatePhase_UPDATE_PHASE_TRIAL)
	stop()
	statuses, lines, _ := n.took()
	want := []*api.UpdateStatus{
		{RolloutId: "r2", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING},
		got[len(got)-1],
		{RolloutId: "r3", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING},
		{RolloutId: "r3", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_TRIAL},
	}
	if diff := cmp.Diff(want, statuses, protocmp.Transform()); diff != "" {
		t.Errorf("statuses of rollouts r2 and r3 (-want +got):\n%s", diff)
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "rollout r2: release 0.0.1 failed: when installing release 0.0.1: ") {
		t.Errorf("console lines %q, want the failure of r2 second", lines)
	}
}

// TestRolloutCannotInstall: a node that cannot install answers every
// rollout that does not give it the release it runs with the reason.
func TestRolloutCannotInstall(t *testing.T) {
	n := &rolloutNode{}
	f := n.follower(nil, "dev")
	f.cannot = errors.New("this node cannot install releases: the node did not boot from a verified system slot")
	n.boot(t, f)
	n.desired.Set(&api.DesiredRelease{RolloutId: "r1", Reference: "registry/cairn@sha256:ab", Version: "1.2.3"})
	got := n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_FAILED)
	if len(got) != 1 || got[0].Reason != f.cannot.Error() {
		t.Errorf("statuses = %v, want one FAILED with reason %q", got, f.cannot)
	}
}

// TestRolloutStagesAhead: a desired release to be staged only is installed
// and reported STAGED, with no reboot; at the node's turn the same release,
// no longer stage-only, boots the staged slot without installing it again
// (the registry's copy is spoiled by then, so an install would fail). A
// staging the node rebooted out of is not answered for the turn.
func TestRolloutStagesAhead(t *testing.T) {
	const newer = "0.0.1"
	node := updatetest.New(t)
	r := node.Push(t, newer)
	n := &rolloutNode{}
	// Rollouts pin the release by digest.
	pinned := strings.TrimSuffix(r.Reference, ":"+r.Artifact.Tag()) + "@" + r.Artifact.Manifest.Descriptor.Digest
	turn := &api.DesiredRelease{RolloutId: "r1", Reference: pinned, Version: newer, TrialDeadlineSeconds: 60}
	stage := proto.Clone(turn).(*api.DesiredRelease)
	stage.StageOnly = true
	n.desired.Set(stage)
	n.boot(t, n.follower(node.Installer, updatetest.Running))
	n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_STAGED)
	statuses, lines, reboots := n.took()
	wantStatuses := []*api.UpdateStatus{
		{RolloutId: "r1", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING, StageOnly: true},
		{RolloutId: "r1", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_STAGED, StageOnly: true},
	}
	if diff := cmp.Diff(wantStatuses, statuses, protocmp.Transform()); diff != "" {
		t.Errorf("statuses of the staging (-want +got):\n%s", diff)
	}
	wantLines := []string{"rollout r1: staging release 0.0.1 ahead of this node's turn", "rollout r1: release 0.0.1 is staged; this node boots it at its turn"}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("console lines of the staging (-want +got):\n%s", diff)
	}
	if reboots != 0 {
		t.Errorf("the staging rebooted the node %d times", reboots)
	}
	if b := node.Record(t).GetB(); b.GetState() != private.SystemSlots_Slot_STAGED || b.GetReleaseDigest() != r.Artifact.Manifest.Descriptor.Digest {
		t.Fatalf("record of slot b after the staging = %v, want STAGED from %s", b, r.Artifact.Manifest.Descriptor.Digest)
	}

	// The same staging again in this boot is not acted on; the turn is.
	node.Registry.Change(r.Artifact.System.Digest, func(b []byte) []byte { b[100] ^= 1; return b })
	node.Registry.Change(r.Artifact.UKI.Digest, func(b []byte) []byte { b[0] ^= 1; return b })
	n.desired.Set(proto.Clone(stage).(*api.DesiredRelease))
	n.desired.Set(turn)
	n.waitPhase(t, "r1", api.UpdatePhase_UPDATE_PHASE_TRIAL)
	n.waitReboot(t)
	statuses, lines, _ = n.took()
	wantStatuses = []*api.UpdateStatus{
		{RolloutId: "r1", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING},
		{RolloutId: "r1", Version: newer, Phase: api.UpdatePhase_UPDATE_PHASE_TRIAL},
	}
	if diff := cmp.Diff(wantStatuses, statuses, protocmp.Transform()); diff != "" {
		t.Errorf("statuses of the turn (-want +got):\n%s", diff)
	}
	if len(lines) != 2 || lines[1] != "rollout r1: rebooting into slot b for the trial of release 0.0.1" {
		t.Errorf("console lines of the turn = %q, want the install and the trial's reboot", lines)
	}
	if b := node.Record(t).GetB(); b.GetState() != private.SystemSlots_Slot_TRIAL {
		t.Errorf("record of slot b after the turn = %v, want TRIAL", b)
	}
}
