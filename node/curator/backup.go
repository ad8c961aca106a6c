package curator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// Backups and restores. The owner takes a backup through any curator; the
// leader takes it through its own etcd member:
//
//	cairnctl ──Backup──▶ curator (follower) ──forward──▶ curator (leader)
//	                                                       │ Status.Snapshot:
//	                                                       │ linearizable read,
//	                                                       │ etcd snapshot into
//	                                                       │ a file on its data
//	                                                       │ partition
//	◀── data, data, ..., trailer (size, SHA-256, revision) ┘
//
// After a restore (consensus, restore.go) the cluster's records still name
// the members that were lost; the first curator to start on the restored
// etcd decommissions them (finishRestore) before it serves anything.

// backupChunkSize is the size of the data pieces of a Backup stream: well
// under the response limit of node/rpc (4 MiB), and large enough that a
// backup of a database as large as etcd's default quota (2 GiB) is some
// eight thousand messages.
const backupChunkSize = 256 << 10

// backupSlot admits one Backup at a time per curator (there is one leader,
// so one in the cluster): each copies etcd's database to the leader's data
// partition and reads it back.
type backupSlot struct{ busy atomic.Bool }

// take takes the slot, or refuses the call with ResourceExhausted.
func (b *backupSlot) take() (release func(), err error) {
	if !b.busy.CompareAndSwap(false, true) {
		return nil, status.Error(codes.ResourceExhausted, "a backup is being taken already; one is taken at a time, retry once it has ended")
	}
	return func() { b.busy.Store(false) }, nil
}

// Backup implements Management.Backup: it streams a snapshot of etcd taken
// by the local member, then its trailer.
func (m management) Backup(_ *api.BackupRequest, srv grpc.ServerStreamingServer[api.BackupResponse]) error {
	release, err := m.quotas.backups.take()
	if err != nil {
		return err
	}
	defer release()
	ctx := srv.Context()
	sn, err := m.cfg.Consensus.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("when taking the snapshot: %w", err)
	}
	defer sn.Close()
	buf := make([]byte, backupChunkSize)
	for {
		n, err := io.ReadFull(sn, buf)
		if n > 0 {
			// Send keeps the message: the buffer cannot be reused.
			if err := srv.Send(&api.BackupResponse{Data: buf[:n]}); err != nil {
				return err
			}
			buf = make([]byte, backupChunkSize)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("when reading the snapshot: %w", err)
		}
	}
	m.log.Infof("Backup of revision %d (%d bytes) sent", sn.Revision, sn.Size)
	return srv.Send(&api.BackupResponse{Trailer: &api.BackupTrailer{
		Size:        sn.Size,
		Sha256:      sn.SHA256,
		Revision:    sn.Revision,
		EtcdVersion: sn.Version,
	}})
}

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
