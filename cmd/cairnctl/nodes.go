package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/proto/api"
)

func newNodeCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Look at and change the nodes of the cluster",
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "list",
			Short: "List the cluster's nodes",
			Args:  cobra.NoArgs,
			RunE:  a.ownerRun(func(ctx context.Context, o *owner, _ []string) error { return a.nodeList(ctx, o) }),
		},
		&cobra.Command{
			Use:   "describe ID",
			Short: "Show everything about one node",
			Args:  exactArgs("ID"),
			RunE:  a.ownerRun(func(ctx context.Context, o *owner, args []string) error { return a.nodeDescribe(ctx, o, args[0]) }),
		},
		a.nodeChangeCommand("approve ID", "Approve a NEW node, letting it commit", "approving", "Approved",
			func(ctx context.Context, m api.ManagementClient, id string) error {
				_, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: id})
				return err
			}),
		a.nodeChangeCommand("decommission ID", "Remove a node from the cluster for good (it may never join again)", "decommissioning", "Decommissioned",
			func(ctx context.Context, m api.ManagementClient, id string) error {
				_, err := m.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: id})
				return err
			}),
		a.nodeChangeCommand("delete ID", "Delete the record of a DECOMMISSIONED or NEW node", "deleting", "Deleted",
			func(ctx context.Context, m api.ManagementClient, id string) error {
				_, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: id})
				return err
			}),
		newNodeResourcesCommand(a),
		newNodeMetricsCommand(a),
		newNodeProfileCommand(a),
		a.roleCommand(true),
		a.roleCommand(false),
		newRebootCommand(a),
		newNodeUpdateCommand(a),
		newNodeSlotsCommand(a),
		newNodeRollbackCommand(a),
		a.powerCommand("poweroff", "Power a node off", "Powering off",
			func(ctx context.Context, c api.NodeManagementClient) error {
				_, err := c.Poweroff(ctx, &api.PoweroffRequest{})
				return err
			}),
	)
	return cmd
}

// newRebootCommand is node reboot: straight into the node's image (kexec)
// unless --firmware asks for a reboot through the firmware.
func newRebootCommand(a *app) *cobra.Command {
	var firmware bool
	cmd := a.powerCommand("reboot", "Reboot a node", "Rebooting",
		func(ctx context.Context, c api.NodeManagementClient) error {
			_, err := c.Reboot(ctx, &api.RebootRequest{Firmware: firmware})
			return err
		})
	cmd.Long = "Reboot a node. The node stops its services in order, then boots the image on its ESP again " +
		"directly (kexec), without the firmware, when that is what it booted from; --firmware reboots " +
		"through the machine's firmware instead, which resets the hardware and is slower."
	cmd.Flags().BoolVar(&firmware, "firmware", false, "reboot through the machine's firmware instead of kexec")
	return cmd
}

// ownerRun adapts an owner command to cobra: it checks node ID arguments,
// then runs f as runAsOwner does.
func (a *app) ownerRun(f func(ctx context.Context, o *owner, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			if err := checkNodeID(args[0]); err != nil {
				return err
			}
		}
		return a.runAsOwner(cmd.Context(), args, f)
	}
}

// runAsOwner bounds an owner command by --timeout, loads the owner
// credentials, renewing the certificate when due (owner.go), runs f, and
// says how to recover when the cluster refuses the certificate.
func (a *app) runAsOwner(ctx context.Context, args []string, f func(ctx context.Context, o *owner, args []string) error) error {
	ctx, cancel := a.withTimeout(ctx)
	defer cancel()
	o, err := a.renewedOwner(ctx)
	if err != nil {
		return err
	}
	return explainOwnerRefusal(o, f(ctx, o, args))
}

func checkNodeID(id string) error {
	if !identity.ValidNodeID(id) {
		return fmt.Errorf("%q is not a node ID (%s and 16 lowercase hex digits)", id, identity.NodeIDPrefix)
	}
	return nil
}

// getNodes calls GetNodes with filter on the curators.
func (a *app) getNodes(ctx context.Context, o *owner, filter *api.NodeFilter) ([]*api.Node, error) {
	var nodes []*api.Node
	err := o.curator(ctx, "listing nodes", func(ctx context.Context, conn *grpc.ClientConn) error {
		res, err := api.NewManagementClient(conn).GetNodes(ctx, &api.GetNodesRequest{Filter: filter})
		nodes = res.GetNodes()
		return err
	})
	return nodes, err
}

// getNode returns the node id, or an error naming it when the cluster has
// no such node.
func (a *app) getNode(ctx context.Context, o *owner, id string) (*api.Node, error) {
	nodes, err := a.getNodes(ctx, o, &api.NodeFilter{Ids: []string{id}})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.GetId() == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("the cluster has no node %s", id)
}

func (a *app) nodeList(ctx context.Context, o *owner) error {
	nodes, err := a.getNodes(ctx, o, nil)
	if err != nil {
		return err
	}
	views := make([]nodeView, 0, len(nodes))
	for _, n := range nodes {
		views = append(views, newNodeView(n))
	}
	if a.output == outputJSON {
		return writeJSON(a.out, views)
	}
	return writeNodeTable(a.out, a.now(), views)
}

func (a *app) nodeDescribe(ctx context.Context, o *owner, id string) error {
	n, err := a.getNode(ctx, o, id)
	if err != nil {
		return err
	}
	v := newNodeView(n)
	if v.State == "UP" {
		// The slots are the node's own word, from its management port.
		sctx, cancel := context.WithTimeout(ctx, describeSlotsTimeout)
		defer cancel()
		err := a.nodeManagement(sctx, o, id, "reading the system slots of node "+id, func(c api.NodeManagementClient) error {
			res, err := c.GetSystemSlots(sctx, &api.GetSystemSlotsRequest{})
			v.Slots = slotViews(res)
			return err
		})
		if err != nil {
			v.SlotsError = err.Error()
		}
	}
	if a.output == outputJSON {
		return writeJSON(a.out, v)
	}
	if err := writeNodeDescription(a.out, a.now(), v); err != nil {
		return err
	}
	switch {
	case v.SlotsError != "":
		_, err := fmt.Fprintf(a.out, "System slots:   unknown: %s\n", v.SlotsError)
		return err
	case len(v.Slots) > 0:
		fmt.Fprintf(a.out, "System slots:\n")
		return writeSlots(a.out, v.Slots)
	}
	return nil
}

// describeSlotsTimeout bounds node describe's call to the node's
// management port, which a node that is down never answers.
const describeSlotsTimeout = 10 * time.Second

// nodeChangeCommand is a command "VERB ID" that makes one Management call
// about a node and reports it done.
func (a *app) nodeChangeCommand(use, short, doing, done string, call func(context.Context, api.ManagementClient, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			err := o.curator(ctx, doing+" node "+id, func(ctx context.Context, conn *grpc.ClientConn) error {
				return call(ctx, api.NewManagementClient(conn), id)
			})
			if err != nil {
				return err
			}
			a.printf("%s node %s.\n", done, id)
			return nil
		}),
	}
}

// roleCommand is "add-role ID ROLE" (add) or "remove-role ID ROLE".
func (a *app) roleCommand(add bool) *cobra.Command {
	use, short, doing := "add-role ID ROLE", "Give a node a role", "adding role %s to node %s"
	if !add {
		use, short, doing = "remove-role ID ROLE", "Take a role from a node", "removing role %s from node %s"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + ". ROLE is " + roleConsensusMember + ", " + roleKubernetesController + " or " +
			roleKubernetesWorker + ", in any case.",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := exactArgs("ID", "ROLE")(cmd, args); err != nil {
				return err
			}
			_, err := roleUpdate(args[0], args[1], add)
			return err
		},
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			req, err := roleUpdate(args[0], args[1], add)
			if err != nil {
				return err
			}
			var res *api.UpdateNodeRolesResponse
			err = o.curator(ctx, fmt.Sprintf(doing, args[1], args[0]), func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				res, err = api.NewManagementClient(conn).UpdateNodeRoles(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			a.printf("Node %s now has roles: %s.\n", args[0], dash(strings.Join(roleNames(res.GetRoles()), ", ")))
			return nil
		}),
	}
}

// powerCommand is "reboot ID" or "poweroff ID", called on the node itself.
func (a *app) powerCommand(verb, short, doing string, call func(context.Context, api.NodeManagementClient) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  exactArgs("ID"),
		RunE: a.ownerRun(func(ctx context.Context, o *owner, args []string) error {
			id := args[0]
			err := a.nodeManagement(ctx, o, id, "asking node "+id+" to "+verb, func(c api.NodeManagementClient) error {
				return call(ctx, c)
			})
			if err != nil {
				return err
			}
			a.printf("%s node %s.\n", doing, id)
			return nil
		}),
	}
}
