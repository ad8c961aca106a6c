package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cairn.dev/cairn/proto/api"
)

// newNodeUpdateCommand is node update: a release into the system slot the
// node does not run.
func newNodeUpdateCommand(a *app) *cobra.Command {
	var image string
	var stage, allowDowngrade bool
	cmd := &cobra.Command{
		Use:   "update ID --image REF --stage",
		Short: "Install a signed Cairn release into the system slot a node does not run",
		Long: "update asks node ID to install the release REF (HOST[:PORT]/REPOSITORY:TAG or\n" +
			"@sha256:DIGEST, as `make release` pushes it) into the system slot it does not\n" +
			"run, and shows its progress. The node checks, before it writes anything, that\n" +
			"the release is signed by a key the cluster trusts, is for its architecture,\n" +
			"is not older than what it runs (unless --allow-downgrade), and that both\n" +
			"images match their digests; it then writes the slot and reads it back against\n" +
			"its verity root hash. Booting the installed slot is not built yet: --stage is\n" +
			"required (docs/updates.md). --timeout defaults to 10m here.",
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if image == "" {
				return errors.New("give --image REF, the release to install")
			}
			if !stage {
				return errors.New("booting an installed release is not built yet: give --stage to install it without booting it")
			}
			a.transferTimeout(cmd)
			return a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
				return a.nodeUpdate(ctx, o, args[0], &api.UpdateRequest{Image: image, Stage: stage, AllowDowngrade: allowDowngrade})
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&image, "image", "", "the release to install, HOST[:PORT]/REPOSITORY:TAG or @sha256:DIGEST")
	cmd.Flags().BoolVar(&stage, "stage", false, "install the release without booting it")
	cmd.Flags().BoolVar(&allowDowngrade, "allow-downgrade", false, "accept a release older than the one the node runs")
	return cmd
}

// nodeUpdate runs an update on node id, printing each step as it comes.
func (a *app) nodeUpdate(ctx context.Context, o *owner, id string, req *api.UpdateRequest) error {
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
		return err
	}
	if res == nil {
		return fmt.Errorf("node %s ended the update without saying what it installed", id)
	}
	if a.output == outputJSON {
		return writeJSON(a.out, map[string]string{"node": id, "slot": res.GetSlot(), "version": res.GetVersion(), "digest": res.GetDigest()})
	}
	a.printf("Node %s staged release %s in system slot %s (%s).\n", id, res.GetVersion(), res.GetSlot(), res.GetDigest())
	return nil
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
	State   string `json:"state"`
	Version string `json:"version"`
}

func (a *app) printSlots(res *api.GetSystemSlotsResponse) error {
	var v []slotView
	for _, s := range res.GetSlots() {
		state := s.GetState()
		switch {
		case s.GetRunning():
			state = "running"
		case state == "":
			state = "empty"
		}
		v = append(v, slotView{Name: s.GetName(), State: state, Version: s.GetVersion()})
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	tw := tabwriter.NewWriter(a.out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "SLOT\tSTATE\tVERSION\n")
	for _, s := range v {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.State, s.Version)
	}
	return tw.Flush()
}
