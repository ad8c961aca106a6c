package curator

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// finishRestore finishes what a restore of a backup left to the curator
// (consensus.Restored): it decommissions the members the backup's cluster
// lost, so that none of them joins the restored cluster with its former
// data, whose etcd belongs to the cluster that was lost. Their machines
// come back only wiped, through a new registration. A record that names a
// node the backup has no record of is skipped.
func (c *curator) finishRestore(ctx context.Context) error {
	r, rev, err := consensus.PendingRestore(ctx, c.root)
	if err != nil || r == nil {
		return err
	}
	for _, id := range r.LostMembers {
		_, err := c.updateNode(ctx, id, func(n *private.Node) error {
			if n.FsmState == api.NodeState_NODE_STATE_DECOMMISSIONED && proto.Equal(n.Roles, &api.NodeRoles{}) {
				return errUnchanged
			}
			n.FsmState = api.NodeState_NODE_STATE_DECOMMISSIONED
			n.Roles = &api.NodeRoles{}
			return nil
		})
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("when decommissioning %s, lost with the cluster the backup was taken of: %w", id, err)
		}
	}
	if err := consensus.FinishRestore(ctx, c.root, rev); err != nil {
		return err
	}
	c.log.Warningf("Restored from a backup of revision %d at %s by %s: decommissioned the lost members %v", r.BackupRevision, r.At.Format(time.RFC3339), r.Member, r.LostMembers)
	return nil
}
