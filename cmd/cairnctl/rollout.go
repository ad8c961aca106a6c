package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/proto/api"
)

// Cluster rollouts: cluster update start|status|abort|clear-bad. The
// curator leader runs the rollout; cairnctl starts it and follows it by
// polling GetRollout.
//
//	start ──StartRollout──▶ rollout ──┐ (--no-wait: done here)
//	status -w ──GetRollout──▶ rollout ─┤
//	                                   ▼
//	   every rolloutPoll: GetRollout ─▶ rolloutChanges(last, new) ─▶ a line
//	   each; until the rollout is not running: done ─▶ exit 0, halted or
//	   aborted ─▶ an error with the reason
//
// Following lasts as long as the rollout does, so --timeout bounds each
// call, not the command, and Ctrl-C stops it (the rollout goes on).

// defaultRolloutPoll is how often a rollout is polled while followed.
const defaultRolloutPoll = 2 * time.Second

func newClusterUpdateCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Update every node of the cluster to a release, one node at a time",
		Long: "update rolls a signed Cairn release out to the cluster's UP nodes. The\n" +
			"curator leader checks the release (signed by a trusted release key, for the\n" +
			"nodes' architecture, not recorded bad) and updates the nodes one at a time:\n" +
			"the consensus members first, then the others, of which Kubernetes workers go\n" +
			"up to --max-unavailable at once. It drains each Kubernetes worker first,\n" +
			"cordoning it and evicting its pods as their PodDisruptionBudgets allow; has\n" +
			"the node install the release and boot it for a trial, as `node update` does;\n" +
			"and waits for the trial boot to prove itself healthy before the node is\n" +
			"uncordoned and the next one's turn comes. At the first node that fails, the\n" +
			"rollout halts: that node rolls back by itself, the release is recorded bad,\n" +
			"and no rollout installs it again until `cluster update clear-bad DIGEST`.\n" +
			"Nodes already updated keep the release.",
	}
	cmd.AddCommand(newRolloutStartCommand(a), newRolloutStatusCommand(a), newRolloutAbortCommand(a), newClearBadReleaseCommand(a))
	return cmd
}

// rolloutFlags are the options of cluster update start.
type rolloutFlags struct {
	image          string
	allowDowngrade bool
	maxUnavailable int32
	drainTimeout   time.Duration
	trialDeadline  time.Duration
	noWait         bool
}

// request checks the flags and turns them into a StartRolloutRequest.
func (f *rolloutFlags) request() (*api.StartRolloutRequest, error) {
	if f.image == "" {
		return nil, errors.New("give --image REF, the release to roll out")
	}
	if _, err := ociimage.ParseReference(f.image); err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	if f.maxUnavailable < 0 {
		return nil, fmt.Errorf("--max-unavailable %d: want 0 (one) or more", f.maxUnavailable)
	}
	drain, err := wholeSeconds("--drain-timeout", f.drainTimeout)
	if err != nil {
		return nil, err
	}
	trial, err := wholeSeconds("--trial-deadline", f.trialDeadline)
	if err != nil {
		return nil, err
	}
	return &api.StartRolloutRequest{
		Reference:            f.image,
		AllowDowngrade:       f.allowDowngrade,
		MaxUnavailable:       f.maxUnavailable,
		DrainTimeoutSeconds:  drain,
		TrialDeadlineSeconds: trial,
	}, nil
}

// wholeSeconds is the duration d of flag in seconds, as the API takes it:
// zero (the default) or from a second to a day.
func wholeSeconds(flag string, d time.Duration) (int64, error) {
	if d != 0 && (d < time.Second || d > 24*time.Hour) {
		return 0, fmt.Errorf("%s %v: want 0 (the default) or from 1s to 24h", flag, d)
	}
	return int64(d / time.Second), nil
}

func newRolloutStartCommand(a *app) *cobra.Command {
	var f rolloutFlags
	cmd := &cobra.Command{
		Use:   "start --image REF [--allow-downgrade] [--max-unavailable N] [--drain-timeout D] [--trial-deadline D] [--no-wait]",
		Short: "Start updating the cluster to a release, and follow it",
		Long: "start asks the curator leader to roll the release REF out (see `cairnctl\n" +
			"cluster update --help`), then follows it as `status -w` does: it prints a\n" +
			"line each time a node's step or the rollout changes, and returns when the\n" +
			"rollout is done, or fails with the reason when it halted or was aborted.\n" +
			"Ctrl-C stops following, not the rollout (`abort` does). --timeout bounds each\n" +
			"call to the cluster, not the wait.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The flags are checked before anything is dialled.
			req, err := f.request()
			if err != nil {
				return err
			}
			return a.rolloutRun(func(ctx context.Context, o *owner) error {
				return a.startRollout(ctx, o, req, !f.noWait)
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&f.image, "image", "", "the release to roll out, HOST[:PORT]/REPOSITORY:TAG or HOST[:PORT]/REPOSITORY@sha256:DIGEST")
	cmd.Flags().BoolVar(&f.allowDowngrade, "allow-downgrade", false, "accept a release older than the one nodes run")
	cmd.Flags().Int32Var(&f.maxUnavailable, "max-unavailable", 0, "how many Kubernetes workers that are not consensus members may be updated at once (0: one)")
	cmd.Flags().DurationVar(&f.drainTimeout, "drain-timeout", 0, "how long a node's drain may wait for disruption budgets (0: the curator's default, 10m)")
	cmd.Flags().DurationVar(&f.trialDeadline, "trial-deadline", 0, "how long a node's trial boot has to become healthy (0: the nodes' default, 10m)")
	cmd.Flags().BoolVar(&f.noWait, "no-wait", false, "return once the rollout started, without following it")
	return cmd
}

func newRolloutStatusCommand(a *app) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status [-w]",
		Short: "Show the last rollout, its steps and the releases recorded bad",
		Long: "status shows the rollout last started: its release, its state and, for each\n" +
			"node in the order the rollout takes them, its step: pending, draining,\n" +
			"updating, done or failed. Below, it lists the releases recorded bad.\n\n" +
			"With -w it follows a running rollout instead: it prints a line each time a\n" +
			"node's step or the rollout's state changes, and returns when the rollout is\n" +
			"done, or fails with the reason when it halted or was aborted; --timeout\n" +
			"bounds each call, not the wait. With -o json, those lines go to stderr and\n" +
			"the rollout's last status to stdout.",
		Args: cobra.NoArgs,
		RunE: a.rolloutRun(func(ctx context.Context, o *owner) error {
			return a.rolloutStatus(ctx, o, watch)
		}),
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it is no longer running")
	return cmd
}

func newRolloutAbortCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "abort",
		Short: "Stop the running rollout: no further node is touched",
		Long: "abort stops the running rollout. No further node is touched, and a drained\n" +
			"node that was not yet given the release is uncordoned. Nodes already updated\n" +
			"keep the release; a node whose update was under way finishes it, or rolls\n" +
			"back, by itself.",
		Args: cobra.NoArgs,
		RunE: a.rolloutRun(a.abortRollout),
	}
}

func newClearBadReleaseCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "clear-bad DIGEST",
		Short: "Forget that a release is bad, so that a rollout may install it again",
		Long: "clear-bad removes the release whose manifest digest is DIGEST\n" +
			"(sha256:<64 hex digits>, as `status` lists it) from the releases recorded\n" +
			"bad. Do it once what made a node fail with it is understood and fixed.",
		Args: exactArgs("DIGEST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			digest := args[0]
			if err := checkDigest(digest); err != nil {
				return err
			}
			return a.rolloutRun(func(ctx context.Context, o *owner) error {
				return a.clearBadRelease(ctx, o, digest)
			})(cmd, args)
		},
	}
}

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkDigest checks that s is a release manifest's digest.
func checkDigest(s string) error {
	if !digestPattern.MatchString(s) {
		return fmt.Errorf("%q is not a release digest: want sha256: and 64 lowercase hex digits", s)
	}
	return nil
}

// rolloutRun runs f as the owner, renewing the certificate when due. Unlike
// ownerRun it leaves the command unbounded, since following a rollout
// lasts as long as the rollout: each call bounds itself by --timeout
// (rolloutCall), and Ctrl-C ends the rest.
func (a *app) rolloutRun(f func(ctx context.Context, o *owner) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		o, err := a.renewedOwner(cmd.Context())
		if err != nil {
			return err
		}
		return explainOwnerRefusal(o, f(cmd.Context(), o))
	}
}

// rolloutCall runs call on the Management service of a curator, bounded by
// --timeout; what names the operation for errors ("aborting the rollout").
func (a *app) rolloutCall(ctx context.Context, o *owner, what string, call func(context.Context, api.ManagementClient) error) error {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	return o.curator(ctx, what, func(ctx context.Context, conn *grpc.ClientConn) error {
		return call(ctx, api.NewManagementClient(conn))
	})
}

func (a *app) getRollout(ctx context.Context, o *owner) (*api.GetRolloutResponse, error) {
	var res *api.GetRolloutResponse
	err := a.rolloutCall(ctx, o, "reading the rollout", func(ctx context.Context, m api.ManagementClient) error {
		var err error
		res, err = m.GetRollout(ctx, &api.GetRolloutRequest{})
		return err
	})
	return res, err
}

// startRollout starts a rollout and, when follow, follows it to its end.
func (a *app) startRollout(ctx context.Context, o *owner, req *api.StartRolloutRequest, follow bool) error {
	var r *api.Rollout
	err := a.rolloutCall(ctx, o, "starting the rollout of "+req.GetReference(), func(ctx context.Context, m api.ManagementClient) error {
		var err error
		r, err = m.StartRollout(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	if !follow {
		if a.output == outputJSON {
			return writeJSON(a.out, newRolloutView(r))
		}
		a.printf("Started rollout %s of release %s (%s) over %d nodes; follow it with\n`cairnctl cluster update status -w`.\n",
			r.GetId(), dash(r.GetVersion()), r.GetReference(), len(r.GetSteps()))
		return nil
	}
	res, err := a.followRollout(ctx, o, &api.GetRolloutResponse{Rollout: r})
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		if err := writeJSON(a.out, newRolloutView(res.GetRollout())); err != nil {
			return err
		}
	}
	return rolloutOutcome(res.GetRollout())
}

// rolloutStatus prints the last rollout or, when watch, follows it.
func (a *app) rolloutStatus(ctx context.Context, o *owner, watch bool) error {
	res, err := a.getRollout(ctx, o)
	if err != nil {
		return err
	}
	if !watch || res.GetRollout() == nil {
		return a.printRolloutStatus(res)
	}
	if res, err = a.followRollout(ctx, o, res); err != nil {
		return err
	}
	if a.output == outputJSON {
		if err := writeJSON(a.out, newRolloutStatusView(res)); err != nil {
			return err
		}
	}
	return rolloutOutcome(res.GetRollout())
}

func (a *app) printRolloutStatus(res *api.GetRolloutResponse) error {
	v := newRolloutStatusView(res)
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	return writeRolloutStatus(a.out, a.now(), v)
}

func (a *app) abortRollout(ctx context.Context, o *owner) error {
	var r *api.Rollout
	err := a.rolloutCall(ctx, o, "aborting the rollout", func(ctx context.Context, m api.ManagementClient) error {
		var err error
		r, err = m.AbortRollout(ctx, &api.AbortRolloutRequest{})
		return err
	})
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return writeJSON(a.out, newRolloutView(r))
	}
	a.printf("Rollout %s of release %s is %s.\n", r.GetId(), dash(r.GetVersion()), withReason(rolloutStateName(r.GetState()), r.GetReason()))
	return nil
}

func (a *app) clearBadRelease(ctx context.Context, o *owner, digest string) error {
	err := a.rolloutCall(ctx, o, "clearing bad release "+digest, func(ctx context.Context, m api.ManagementClient) error {
		_, err := m.ClearBadRelease(ctx, &api.ClearBadReleaseRequest{Digest: digest})
		return err
	})
	if err != nil {
		return err
	}
	a.printf("Release %s is no longer recorded bad; a rollout may install it again.\n", digest)
	return nil
}

// followRollout prints, timestamped, what changed in the rollout of last
// (rolloutChanges) as it polls GetRollout every a.rolloutPoll, until that
// rollout is no longer running, and returns the last answer. The lines go
// to stdout, or to stderr with -o json. It stops when ctx ends, and when
// the curators do not answer for longer than rolloutPatience.
func (a *app) followRollout(ctx context.Context, o *owner, last *api.GetRolloutResponse) (*api.GetRolloutResponse, error) {
	log := a.out
	if a.output == outputJSON {
		log = a.errOut
	}
	id := last.GetRollout().GetId()
	printLines(log, a.now(), rolloutChanges(nil, last.GetRollout()))
	// failing is the error of the polls since the last answer, and since
	// when they fail.
	var failing error
	var since time.Time
	for last.GetRollout().GetState() == api.RolloutState_ROLLOUT_STATE_RUNNING {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped following rollout %s, which goes on: %w", id, ctx.Err())
		case <-time.After(a.rolloutPoll):
		}
		res, err := a.getRollout(ctx, o)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("stopped following rollout %s, which goes on: %w", id, ctx.Err())
		case err != nil && !unreachable(err):
			return nil, fmt.Errorf("following rollout %s: %w", id, err)
		case err != nil && failing == nil:
			failing, since = err, a.now()
			printLines(log, since, []string{fmt.Sprintf("no curator answers (a consensus member may be rebooting for its update); trying for up to %s: %v",
				rolloutPatience(last.GetRollout()), err)})
			continue
		case err != nil:
			failing = err
			if a.now().Sub(since) > rolloutPatience(last.GetRollout()) {
				return nil, fmt.Errorf("following rollout %s: no curator answered for %s: %w", id, a.now().Sub(since).Round(time.Second), failing)
			}
			continue
		case failing != nil:
			printLines(log, a.now(), []string{"the curators answer again"})
			failing = nil
		}
		if got := res.GetRollout().GetId(); got != id {
			return nil, fmt.Errorf("rollout %s was replaced by rollout %s, which `cairnctl cluster update status` shows", id, got)
		}
		printLines(log, a.now(), rolloutChanges(last.GetRollout(), res.GetRollout()))
		last = res
	}
	return last, nil
}

// unreachable says whether err, of a call to the curators, may be
// because none of them answers for a while: a connection that failed, or
// no leader in time. Other errors (a refused certificate, a call the
// curators do not serve) do not pass by waiting.
func unreachable(err error) bool {
	s, ok := status.FromError(err)
	return !ok || s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded
}

// rolloutPatience is how long following r tolerates curators that do not
// answer: a consensus member's update reboots it, and a cluster with one
// has no curator until that node is back. As node update does for a
// trial, it waits for the trial deadline and 10 minutes more.
func rolloutPatience(r *api.Rollout) time.Duration {
	return trialOrDefault(time.Duration(r.GetTrialDeadlineSeconds())*time.Second) + 10*time.Minute
}

// rolloutOutcome is nil for a rollout that is done, and otherwise an error
// that says where it ended and why.
func rolloutOutcome(r *api.Rollout) error {
	switch r.GetState() {
	case api.RolloutState_ROLLOUT_STATE_DONE:
		return nil
	case api.RolloutState_ROLLOUT_STATE_HALTED:
		return fmt.Errorf("rollout %s halted: %s", r.GetId(), dash(r.GetReason()))
	case api.RolloutState_ROLLOUT_STATE_ABORTED:
		return fmt.Errorf("rollout %s was %s", r.GetId(), withReason("aborted", r.GetReason()))
	}
	return fmt.Errorf("rollout %s is %s", r.GetId(), withReason(rolloutStateName(r.GetState()), r.GetReason()))
}

// printLines writes lines to w, each after the time of day at now.
func printLines(w io.Writer, now time.Time, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "%s %s\n", now.Format(time.TimeOnly), l)
	}
}
