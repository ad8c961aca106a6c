package nodemanagement

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/proto/api"
)

// maxBackupSize bounds the backup a Recover call may announce: etcd's
// largest supported database (its quota may be raised to 8 GiB) and
// etcd's checksum. The backup is written to the data partition as it
// arrives.
const maxBackupSize = 8<<30 + sha256.Size

// Recover receives a backup, has the node's etcd member stage it
// (consensus.StageRestore: it checks the backup's size, SHA-256 and
// cluster CA), answers, then reboots the node; etcd restores the backup
// when it starts again. One backup is received at a time.
//
//	cairnctl cluster recover ──header, data...──▶ Service
//	                                                │ consensus.StageRestore
//	                                                │   (data partition)
//	                  ◀──────── revision ───────────┤
//	                                                └─ timer ─▶ Config.Reboot()
func (s *Service) Recover(srv grpc.ClientStreamingServer[api.RecoverRequest, api.RecoverResponse]) error {
	if s.cfg.EtcdDataDir == "" || s.cfg.Reboot == nil {
		return status.Error(codes.Unimplemented, "this node cannot restore backups")
	}
	if !s.receiving.CompareAndSwap(false, true) {
		return status.Error(codes.ResourceExhausted, "this node is receiving a backup already")
	}
	defer s.receiving.Store(false)
	if going := s.goingDown(); going != "" {
		return status.Errorf(codes.FailedPrecondition, "the node is already going down for %s", going)
	}
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	switch {
	case h == nil:
		return status.Error(codes.InvalidArgument, "the first message carries no header")
	case h.Size <= 0 || h.Size > maxBackupSize:
		return status.Errorf(codes.InvalidArgument, "header.size %d is not the size of a backup (1 byte to %d)", h.Size, int64(maxBackupSize))
	case len(h.Sha256) != sha256.Size:
		return status.Errorf(codes.InvalidArgument, "header.sha256 is %d bytes, want %d", len(h.Sha256), sha256.Size)
	}
	s.logger().Warningf("The owner sends a backup of %d bytes to rebuild the cluster from", h.Size)
	rev, err := consensus.StageRestore(s.cfg.EtcdDataDir, &recoverReader{srv: srv}, h.Size, h.Sha256, s.cfg.ClusterCA)
	switch {
	case errors.Is(err, consensus.ErrBadBackup):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, consensus.ErrNoData):
		return status.Errorf(codes.FailedPrecondition, "%v: recover on a consensus member that survived", err)
	case err != nil:
		code := status.Code(err) // the stream's, when receiving failed
		if code == codes.Unknown {
			code = codes.Internal
		}
		return status.Error(code, err.Error())
	}
	if err := s.schedule(srv.Context(), "reboot to restore a backup", s.cfg.Reboot); err != nil {
		return status.Errorf(codes.FailedPrecondition, "the backup is staged and will be restored when the node next starts, but: %v", status.Convert(err).Message())
	}
	return srv.SendAndClose(&api.RecoverResponse{Revision: rev})
}

// recoverReader reads the data of a Recover stream, message after message.
type recoverReader struct {
	srv  grpc.ClientStreamingServer[api.RecoverRequest, api.RecoverResponse]
	left []byte
}

func (r *recoverReader) Read(p []byte) (int, error) {
	for len(r.left) == 0 {
		m, err := r.srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("when receiving the backup: %w", err)
		}
		if m.Header != nil {
			return 0, status.Error(codes.InvalidArgument, "a header after the first message")
		}
		r.left = m.Data
	}
	n := copy(p, r.left)
	r.left = r.left[n:]
	return n, nil
}
