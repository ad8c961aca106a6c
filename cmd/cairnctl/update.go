package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn.dev/cairn/proto/api"
)

// newNodeUpdateCommand is node update: a release into the system slot the
// node does not run, then a trial boot of it.
func newNodeUpdateCommand(a *app) *cobra.Command {
	var image string
	var stage, allowDowngrade, noWait bool
	var deadline time.Duration
	cmd := &cobra.Command{
		Use:   "update ID --image REF [--stage] [--trial-deadline D] [--no-wait]",
		Short: "Install a signed Cairn release on a node and boot it for a trial",
		Long: "update asks node ID to install the release REF (HOST[:PORT]/REPOSITORY:TAG or\n" +
			"HOST[:PORT]/REPOSITORY@sha256:DIGEST, as `make release` pushes it) into the system slot it does not\n" +
			"run, and shows its progress. The node checks, before it writes anything, that\n" +
			"the release is signed by a key the cluster trusts, is for its architecture,\n" +
			"is not older than what it runs (unless --allow-downgrade), and that both\n" +
			"images match their digests; it then writes the slot and reads it back against\n" +
			"its verity root hash.\n\n" +
			"Then, unless --stage, the node reboots through the firmware into the new slot\n" +
			"once. The slot becomes the default when the node is healthy (enrolled, and\n" +
			"serving what its roles ask for) within --trial-deadline; a panic, a hang, a\n" +
			"power cut or a missed deadline brings the node back on the slot it ran, which\n" +
			"records the new one bad and why (docs/updates.md). update waits for that\n" +
			"outcome and prints it, unless --no-wait. --timeout defaults to 10m for the\n" +
			"install, and the wait adds the trial deadline and 10m more.",
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if image == "" {
				return errors.New("give --image REF, the release to install")
			}
			if deadline < 0 || deadline > 24*time.Hour {
				return fmt.Errorf("--trial-deadline %v is not between 0 and 24h", deadline)
			}
			a.transferTimeout(cmd)
			if !stage && !noWait && !cmd.Flags().Changed("timeout") {
				a.timeout += trialOrDefault(deadline) + 10*time.Minute
			}
			return a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
				req := &api.UpdateRequest{Image: image, Stage: stage, AllowDowngrade: allowDowngrade,
					TrialDeadlineSeconds: uint32(deadline / time.Second)}
				res, err := a.nodeUpdate(ctx, o, args[0], req)
				if err != nil || stage || noWait {
					return err
				}
				return a.waitTrial(ctx, o, args[0], res)
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the release to install, HOST[:PORT]/REPOSITORY:TAG or HOST[:PORT]/REPOSITORY@sha256:DIGEST")
	cmd.Flags().BoolVar(&stage, "stage", false, "install the release without booting it")
	cmd.Flags().BoolVar(&allowDowngrade, "allow-downgrade", false, "accept a release older than the one the node runs")
	cmd.Flags().DurationVar(&deadline, "trial-deadline", 0, "how long the trial boot has to become healthy (0: the node's default, 10m)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the node reboots for the trial, without waiting for its outcome")
	return cmd
}

// trialOrDefault is the trial deadline d asks for.
func trialOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return 10 * time.Minute
	}
	return d
}

// nodeUpdate runs an update on node id, printing each step as it comes,
// and returns what the node installed.
func (a *app) nodeUpdate(ctx context.Context, o *owner, id string, req *api.UpdateRequest) (*api.UpdateResult, error) {
	var res *api.UpdateResult
	err := a.nodeManagement(ctx, o, id, "updating node "+id, func(c api.NodeManagementClient) error {
		stream, err := c.Update(ctx, req)
		if err != nil {
			return err
		}
		last := ""
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if m.GetResult() != nil {
				res = m.GetResult()
				continue
			}
			line := m.GetStep()
			if m.GetTotalBytes() > 0 {
				line += fmt.Sprintf(": %s of %s", mib(uint64(m.GetDoneBytes())), mib(uint64(m.GetTotalBytes())))
			}
			if line != last && a.output != outputJSON {
				fmt.Fprintf(a.errOut, "%s: %s\n", id, line)
				last = line
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("node %s ended the update without saying what it installed", id)
	}
	if a.output == outputJSON && !res.GetRebooting() {
		return res, writeJSON(a.out, map[string]string{"node": id, "slot": res.GetSlot(), "version": res.GetVersion(), "digest": res.GetDigest()})
	}
	a.printf("Node %s staged release %s in system slot %s (%s).\n", id, res.GetVersion(), res.GetSlot(), res.GetDigest())
	if res.GetRebooting() {
		a.printf("Node %s reboots through the firmware into slot %s for its trial.\n", id, res.GetSlot())
	}
	return res, nil
}

// trialPoll is how often waitTrial asks the node how its trial goes.
const trialPoll = 3 * time.Second

// waitTrial waits for the trial of res's slot on node id to end: the node
// runs the slot and it proved itself (good), or the node runs the other
// slot and recorded this one bad. Calls that fail while the node reboots
// are tried again until ctx ends.
func (a *app) waitTrial(ctx context.Context, o *owner, id string, res *api.UpdateResult) error {
	var lastErr error
	said := ""
	for {
		var slots *api.GetSystemSlotsResponse
		err := a.nodeManagement(ctx, o, id, "reading the system slots of node "+id, func(c api.NodeManagementClient) error {
			var err error
			slots, err = c.GetSystemSlots(ctx, &api.GetSystemSlotsRequest{})
			return err
		})
		if err == nil {
			for _, s := range slots.GetSlots() {
				if s.GetName() != res.GetSlot() {
					continue
				}
				switch {
				case s.GetState() == "bad":
					return fmt.Errorf("node %s rolled back from %s: %s", id, s.GetVersion(), s.GetReason())
				case s.GetRunning() && s.GetState() == "good":
					if a.output == outputJSON {
						return writeJSON(a.out, map[string]string{"node": id, "slot": res.GetSlot(), "version": s.GetVersion(), "digest": res.GetDigest(), "state": "good"})
					}
					a.printf("Node %s runs release %s from slot %s, which proved itself and is now the default.\n", id, s.GetVersion(), s.GetName())
					return nil
				case s.GetRunning() && said != "trial" && a.output != outputJSON:
					fmt.Fprintf(a.errOut, "%s: slot %s booted; waiting for the node to be healthy\n", id, s.GetName())
					said = "trial"
				}
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("waiting for the trial of slot %s on node %s: %w (last: %w)", res.GetSlot(), id, ctx.Err(), lastErr)
			}
			return fmt.Errorf("waiting for the trial of slot %s on node %s: %w", res.GetSlot(), id, ctx.Err())
		case <-time.After(trialPoll):
		}
	}
}

// newNodeRollbackCommand is node rollback: back to the other slot.
func newNodeRollbackCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback ID",
		Short: "Make a node boot the system slot it ran before, and reboot it",
		Long: "rollback asks node ID to make its other system slot, which must have proved\n" +
			"itself before (state good), the firmware's default again, and to reboot into\n" +
			"it through the firmware.",
		Args: exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			var res *api.RollbackResponse
			err := a.nodeManagement(ctx, o, id, "rolling node "+id+" back", func(c api.NodeManagementClient) error {
				var err error
				res, err = c.Rollback(ctx, &api.RollbackRequest{})
				return err
			})
			if err != nil {
				return err
			}
			a.printf("Node %s reboots into slot %s (%s).\n", id, res.GetSlot(), res.GetVersion())
			return nil
		}),
	}
}

// newNodeSlotsCommand is node slots: what each system slot of a node holds.
func newNodeSlotsCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "slots ID",
		Short: "Show what each system slot of a node holds",
		Args:  exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			var res *api.GetSystemSlotsResponse
			err := a.nodeManagement(ctx, o, id, "reading the system slots of node "+id, func(c api.NodeManagementClient) error {
				var err error
				res, err = c.GetSystemSlots(ctx, &api.GetSystemSlotsRequest{})
				return err
			})
			if err != nil {
				return err
			}
			return a.printSlots(res)
		}),
	}
}

// slotView is one system slot as cairnctl prints it.
type slotView struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	State   string `json:"state"`
	Version string `json:"version"`
	Reason  string `json:"reason,omitempty"`
}

func (a *app) printSlots(res *api.GetSystemSlotsResponse) error {
	v := slotViews(res)
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	return writeSlots(a.out, v)
}

// slotViews are the slots of res as cairnctl prints them.
func slotViews(res *api.GetSystemSlotsResponse) []slotView {
	var v []slotView
	for _, s := range res.GetSlots() {
		state := s.GetState()
		if state == "" {
			state = "empty"
		}
		v = append(v, slotView{Name: s.GetName(), Running: s.GetRunning(), State: state, Version: s.GetVersion(), Reason: s.GetReason()})
	}
	return v
}

// writeSlots writes v as a table.
func writeSlots(w io.Writer, v []slotView) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "SLOT\tRUNNING\tSTATE\tVERSION\tREASON\n")
	for _, s := range v {
		running := ""
		if s.Running {
			running = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, running, s.State, s.Version, s.Reason)
	}
	return tw.Flush()
}
