package curator

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/proto/api"
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
