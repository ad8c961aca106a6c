package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"cairn.dev/cairn/proto/api"
)

// rolloutStatusView is what cluster update status prints with -o json.
type rolloutStatusView struct {
	// Rollout is the rollout last started, null if none ever was.
	Rollout *rolloutView `json:"rollout"`
	// BadReleases are the releases recorded bad; never null.
	BadReleases []badReleaseView `json:"bad_releases"`
}

// rolloutView is a rollout as cairnctl prints it; start and abort print
// it with -o json.
type rolloutView struct {
	ID string `json:"id"`
	// Reference is the release pinned by digest,
	// "HOST/REPOSITORY@sha256:<hex>", and Digest its manifest's digest.
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
	Version   string `json:"version"`
	// AllowDowngrade, MaxUnavailable, DrainTimeoutSeconds and
	// TrialDeadlineSeconds are the options it was started with; zero is
	// the default.
	AllowDowngrade       bool  `json:"allow_downgrade"`
	MaxUnavailable       int32 `json:"max_unavailable"`
	DrainTimeoutSeconds  int64 `json:"drain_timeout_seconds"`
	TrialDeadlineSeconds int64 `json:"trial_deadline_seconds"`
	// State is running, done, halted or aborted (rolloutStateName), and
	// Reason why it halted or was aborted.
	State  string `json:"state"`
	Reason string `json:"reason"`
	// Started and Ended are by the leader's clock; Ended is null while it
	// runs.
	Started *time.Time `json:"started"`
	Ended   *time.Time `json:"ended"`
	// Steps are one per node, in the order they run; never null.
	Steps []stepView `json:"steps"`
}

// stepView is one node's step of a rollout.
type stepView struct {
	NodeID string `json:"node_id"`
	// Phase is pending, draining, updating, done or failed
	// (stepPhaseName); Message what it waits for, or why it failed.
	Phase   string `json:"phase"`
	Message string `json:"message"`
	// Started and Finished are null before the step left pending and
	// before it ended.
	Started     *time.Time `json:"started"`
	Finished    *time.Time `json:"finished"`
	EvictedPods int32      `json:"evicted_pods"`
}

// badReleaseView is a release recorded bad: where it failed and why.
type badReleaseView struct {
	Digest   string     `json:"digest"`
	Version  string     `json:"version"`
	NodeID   string     `json:"node_id"`
	Reason   string     `json:"reason"`
	Recorded *time.Time `json:"recorded"`
}

func newRolloutStatusView(res *api.GetRolloutResponse) rolloutStatusView {
	v := rolloutStatusView{BadReleases: []badReleaseView{}}
	if res.GetRollout() != nil {
		r := newRolloutView(res.GetRollout())
		v.Rollout = &r
	}
	for _, b := range res.GetBadReleases() {
		v.BadReleases = append(v.BadReleases, badReleaseView{
			Digest:   b.GetDigest(),
			Version:  b.GetVersion(),
			NodeID:   b.GetNodeId(),
			Reason:   b.GetReason(),
			Recorded: unixNanos(b.GetRecordedUnixNanos()),
		})
	}
	return v
}

func newRolloutView(r *api.Rollout) rolloutView {
	v := rolloutView{
		ID:                   r.GetId(),
		Reference:            r.GetReference(),
		Digest:               r.GetDigest(),
		Version:              r.GetVersion(),
		AllowDowngrade:       r.GetAllowDowngrade(),
		MaxUnavailable:       r.GetMaxUnavailable(),
		DrainTimeoutSeconds:  r.GetDrainTimeoutSeconds(),
		TrialDeadlineSeconds: r.GetTrialDeadlineSeconds(),
		State:                rolloutStateName(r.GetState()),
		Reason:               r.GetReason(),
		Started:              unixNanos(r.GetStartedUnixNanos()),
		Ended:                unixNanos(r.GetEndedUnixNanos()),
		Steps:                []stepView{},
	}
	for _, s := range r.GetSteps() {
		v.Steps = append(v.Steps, stepView{
			NodeID:      s.GetNodeId(),
			Phase:       stepPhaseName(s.GetPhase()),
			Message:     s.GetMessage(),
			Started:     unixNanos(s.GetStartedUnixNanos()),
			Finished:    unixNanos(s.GetFinishedUnixNanos()),
			EvictedPods: s.GetEvictedPods(),
		})
	}
	return v
}

// rolloutStateName is a RolloutState in lower case without its
// ROLLOUT_STATE_ prefix: running, done, halted, aborted.
func rolloutStateName(s api.RolloutState) string {
	if name, ok := api.RolloutState_name[int32(s)]; ok {
		return strings.ToLower(strings.TrimPrefix(name, "ROLLOUT_STATE_"))
	}
	return fmt.Sprintf("state(%d)", s)
}

// stepPhaseName is a StepPhase in lower case without its STEP_PHASE_
// prefix: pending, draining, updating, done, failed.
func stepPhaseName(p api.StepPhase) string {
	if name, ok := api.StepPhase_name[int32(p)]; ok {
		return strings.ToLower(strings.TrimPrefix(name, "STEP_PHASE_"))
	}
	return fmt.Sprintf("phase(%d)", p)
}

// withReason is what, followed by why when there is a why.
func withReason(what, why string) string {
	if why == "" {
		return what
	}
	return what + ": " + why
}

// elapsed is how long from start to end, or to now while end is nil; "-"
// before start.
func elapsed(now time.Time, start, end *time.Time) string {
	if start == nil {
		return "-"
	}
	to := now
	if end != nil {
		to = *end
	}
	// The leader's clock and this machine's may disagree.
	return max(to.Sub(*start), 0).Round(time.Second).String()
}

// writeRolloutStatus prints the rollout of v and its steps, then the bad
// releases, if any.
func writeRolloutStatus(w io.Writer, now time.Time, v rolloutStatusView) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if r := v.Rollout; r == nil {
		fmt.Fprintln(tw, "no rollout has been started")
	} else {
		timeOf := func(t *time.Time) string {
			if t == nil {
				return "-"
			}
			return t.Format(time.RFC3339) + " (" + age(now, t) + ")"
		}
		fmt.Fprintf(tw, "Rollout:\t%s\n", r.ID)
		fmt.Fprintf(tw, "Release:\t%s\n", dash(r.Version))
		fmt.Fprintf(tw, "Digest:\t%s\n", dash(r.Digest))
		fmt.Fprintf(tw, "Reference:\t%s\n", dash(r.Reference))
		fmt.Fprintf(tw, "State:\t%s\n", r.State)
		fmt.Fprintf(tw, "Reason:\t%s\n", dash(r.Reason))
		fmt.Fprintf(tw, "Started:\t%s\n", timeOf(r.Started))
		fmt.Fprintf(tw, "Ended:\t%s\n", timeOf(r.Ended))
		fmt.Fprintf(tw, "Elapsed:\t%s\n", elapsed(now, r.Started, r.Ended))
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("when writing the rollout: %w", err)
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NODE\tPHASE\tEVICTED\tELAPSED\tMESSAGE")
		for _, s := range r.Steps {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.NodeID, s.Phase, s.EvictedPods, elapsed(now, s.Started, s.Finished), dash(s.Message))
		}
	}
	if len(v.BadReleases) > 0 {
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("when writing the rollout: %w", err)
		}
		fmt.Fprintln(tw, "\nBad releases:")
		fmt.Fprintln(tw, "DIGEST\tVERSION\tNODE\tREASON")
		for _, b := range v.BadReleases {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Digest, dash(b.Version), dash(b.NodeID), dash(b.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing the rollout: %w", err)
	}
	return nil
}

// rolloutChanges are the lines that tell what changed from prev to cur,
// the rollout followed: one per step whose phase or message changed, then
// one when the rollout's state did. With prev nil, or of another rollout,
// they tell cur from its start: a line naming it and its state, then one
// per step that is not plainly pending.
func rolloutChanges(prev, cur *api.Rollout) []string {
	var lines []string
	if prev == nil || prev.GetId() != cur.GetId() {
		lines = append(lines, fmt.Sprintf("rollout %s of release %s (%s): %s",
			cur.GetId(), dash(cur.GetVersion()), dash(cur.GetReference()), withReason(rolloutStateName(cur.GetState()), cur.GetReason())))
		prev = nil
	}
	before := make(map[string]*api.RolloutStep)
	for _, s := range prev.GetSteps() {
		before[s.GetNodeId()] = s
	}
	for _, s := range cur.GetSteps() {
		p, ok := before[s.GetNodeId()]
		if !ok {
			p = &api.RolloutStep{Phase: api.StepPhase_STEP_PHASE_PENDING}
		}
		if p.GetPhase() != s.GetPhase() || p.GetMessage() != s.GetMessage() {
			lines = append(lines, s.GetNodeId()+": "+withReason(stepPhaseName(s.GetPhase()), s.GetMessage()))
		}
	}
	if prev != nil && prev.GetState() != cur.GetState() {
		lines = append(lines, fmt.Sprintf("rollout %s: %s", cur.GetId(), withReason(rolloutStateName(cur.GetState()), cur.GetReason())))
	}
	return lines
}
