package nodemanagement

import (
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// stoppedMember is an etcd member that ran, was backed up, and stopped, as
// a surviving consensus member whose cluster lost its quorum.
type stoppedMember struct {
	member *consensustest.Member
	ca     []byte
	backup []byte
	rev    int64
}

func newStoppedMember(t *testing.T) *stoppedMember {
	t.Helper()
	ctx := fixture.Context(t)
	m := consensustest.NewMember(t, nil)
	m.Start(t)
	st := m.WaitVoter(t)
	ca, err := consensus.ClusterCA().Ensure(ctx, st.Client())
	if err != nil {
		t.Fatal(err)
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer sn.Close()
	backup, err := io.ReadAll(sn)
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	return &stoppedMember{member: m, ca: ca, backup: backup, rev: sn.Revision}
}

// sendBackup calls Recover with header and then data in pieces of 100 KiB.
func sendBackup(ctx context.Context, c api.NodeManagementClient, header *api.RecoverHeader, data []byte) (*api.RecoverResponse, error) {
	stream, err := c.Recover(ctx)
	if err != nil {
		return nil, err
	}
	msgs := []*api.RecoverRequest{{Header: header}}
	for len(data) > 0 {
		n := min(len(data), 100<<10)
		msgs = append(msgs, &api.RecoverRequest{Data: data[:n]})
		data = data[n:]
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			// The server ended the stream: CloseAndRecv says why.
			break
		}
	}
	return stream.CloseAndRecv()
}

func headerOf(b []byte) *api.RecoverHeader {
	sum := sha256.Sum256(b)
	return &api.RecoverHeader{Size: int64(len(b)), Sha256: sum[:]}
}

// TestRecover sends a backup to a node through a real server: the node
// answers with the backup's revision, reboots, and its etcd comes back
// restored.
func TestRecover(t *testing.T) {
	ctx := fixture.Context(t)
	sm := newStoppedMember(t)
	actions := newRecordingActions()
	cfg := actions.config(logtree.New())
	cfg.EtcdDataDir, cfg.ClusterCA = sm.member.Config.DataDir, sm.ca
	svc := New(cfg)
	svc.delay = 10 * time.Millisecond
	srv := serve(t, svc)

	res, err := sendBackup(ctx, srv.owner(t), headerOf(sm.backup), sm.backup)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if res.Revision != sm.rev {
		t.Errorf("Recover answered revision %d, want the backup's %d", res.Revision, sm.rev)
	}
	if what := actions.wait(t); what != "reboot" {
		t.Errorf("Recover called %s, want reboot", what)
	}
	// Later requests are refused: the node is going down.
	if _, err := srv.owner(t).Reboot(ctx, &api.RebootRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Reboot after Recover = %v, want FailedPrecondition", err)
	}

	// The "reboot": etcd starts again, and restores the backup.
	sm.member.Start(t)
	st := sm.member.WaitVoter(t)
	r, _, err := consensus.PendingRestore(ctx, st.Client())
	if err != nil || r == nil {
		t.Errorf("after the restart, PendingRestore = %+v, %v, want the record of a restore", r, err)
	}
}

// TestRecoverRefuses sends what Recover must refuse, and checks that the
// node neither reboots nor has anything to restore on its next start.
func TestRecoverRefuses(t *testing.T) {
	ctx := fixture.Context(t)
	sm := newStoppedMember(t)
	wrongSum := headerOf(sm.backup)
	wrongSum.Sha256[0] ^= 1
	for _, tc := range []struct {
		name   string
		dir    string
		header *api.RecoverHeader
		data   []byte
		want   codes.Code
	}{
		{"without header", sm.member.Config.DataDir, nil, sm.backup, codes.InvalidArgument},
		{"of size 0", sm.member.Config.DataDir, &api.RecoverHeader{Sha256: wrongSum.Sha256}, nil, codes.InvalidArgument},
		{"with another SHA-256", sm.member.Config.DataDir, wrongSum, sm.backup, codes.InvalidArgument},
		{"cut short", sm.member.Config.DataDir, headerOf(sm.backup), sm.backup[:len(sm.backup)/2], codes.InvalidArgument},
		{"to a node without etcd data", t.TempDir(), headerOf(sm.backup), sm.backup, codes.FailedPrecondition},
		{"to a node that cannot restore", "", headerOf(sm.backup), sm.backup, codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			actions := newRecordingActions()
			cfg := actions.config(logtree.New())
			cfg.EtcdDataDir, cfg.ClusterCA = tc.dir, sm.ca
			srv := serve(t, New(cfg))
			_, err := sendBackup(ctx, srv.owner(t), tc.header, tc.data)
			if status.Code(err) != tc.want {
				t.Errorf("Recover %s = %v, want %s", tc.name, err, tc.want)
			}
			if n := actions.reboots.Load(); n != 0 {
				t.Errorf("Recover %s rebooted the node", tc.name)
			}
		})
	}
	// Nothing was staged: etcd starts on its own data.
	sm.member.Start(t)
	st := sm.member.WaitVoter(t)
	if r, _, err := consensus.PendingRestore(ctx, st.Client()); err != nil || r != nil {
		t.Errorf("after the refusals, PendingRestore = %+v, %v, want none", r, err)
	}
}
