package curator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/pkg/etcdsnapshot"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// takeBackup calls Management.Backup and returns the file it streamed and
// its trailer, which it checks against the file.
func takeBackup(ctx context.Context, t *testing.T, m api.ManagementClient) ([]byte, *api.BackupTrailer) {
	t.Helper()
	stream, err := m.Backup(ctx, &api.BackupRequest{})
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	var file []byte
	var trailer *api.BackupTrailer
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Backup: receiving: %v", err)
		}
		if trailer != nil {
			t.Fatalf("Backup: a message after the trailer")
		}
		file = append(file, res.Data...)
		trailer = res.Trailer
	}
	if trailer == nil {
		t.Fatalf("Backup ended without a trailer")
	}
	sum := sha256.Sum256(file)
	if trailer.Size != int64(len(file)) || !bytes.Equal(trailer.Sha256, sum[:]) {
		t.Fatalf("Backup trailer says %d bytes of SHA-256 %x, the stream had %d of %x", trailer.Size, trailer.Sha256, len(file), sum)
	}
	return file, trailer
}

// writeBackup writes a backup into a file of its own and returns its path.
func writeBackup(t *testing.T, file []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBackup takes a backup through the curator and reads it back: it
// holds what was written before the call, up to the revision its trailer
// names, and only one backup is taken at a time.
func TestBackup(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	ticket, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	file, trailer := takeBackup(ctx, t, m)
	t.Logf("backup of %d bytes at revision %d, etcd %s", trailer.Size, trailer.Revision, trailer.EtcdVersion)

	f, err := etcdsnapshot.Open(writeBackup(t, file))
	if err != nil {
		t.Fatalf("the backup is no etcd snapshot: %v", err)
	}
	defer f.Close()
	if f.Revision() != trailer.Revision {
		t.Errorf("backup holds revision %d, its trailer says %d", f.Revision(), trailer.Revision)
	}
	got, err := f.Get(namespace + "/" + ticketKey)
	if err != nil || !bytes.Equal(got, ticket.Ticket) {
		t.Errorf("register ticket in the backup = %x, %v, want %x", got, err, ticket.Ticket)
	}

	// A second backup while the first is being streamed is refused; once
	// the first has ended, one is taken again. The first is made larger
	// than gRPC's flow control windows, so that its stream waits for its
	// reader, which does not read.
	root := c.nodes[0].member.WaitVoter(t).Client()
	for i := range 40 {
		if _, err := root.Put(ctx, fmt.Sprintf("filler/%d", i), strings.Repeat("x", 100<<10)); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	first, err := m.Backup(sctx, &api.BackupRequest{})
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("Backup: receiving: %v", err)
	}
	second, err := m.Backup(ctx, &api.BackupRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Backup while another is streamed = %v, want ResourceExhausted", err)
	}
	cancel()
	fixture.Eventually(t, 30*time.Second, "a backup after the first ended", func() error {
		stream, err := m.Backup(ctx, &api.BackupRequest{})
		if err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return err
			}
		}
	})
}

// TestRecovery loses two of three consensus members for good and rebuilds
// the cluster on the third from a backup taken through a follower before:
// the curator serves again with the backup's records, roles and register
// ticket, the lost members are out of etcd and decommissioned, a worker
// carries on, and the restored cluster takes a new member.
func TestRecovery(t *testing.T) {
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option())
	ctx := fixture.ContextTimeout(t, 8*time.Minute)
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	addr0 := n0.addr.String()
	for range 2 {
		c.addMember(t, addr0, newTestNode(t), ports)
	}
	n1, n2 := c.nodes[1], c.nodes[2]
	worker := newTestNode(t)
	c.enrol(t, addr0, worker)
	yes := true
	if _, err := c.mgmt(t, addr0).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: worker.id(), KubernetesWorker: &yes}); err != nil {
		t.Fatalf("UpdateNodeRoles(%s, worker): %v", worker.id(), err)
	}
	before, err := c.mgmt(t, addr0).GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	ticket, err := c.mgmt(t, addr0).GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	oldPeerCA := peerCACertificate(ctx, t, n0)

	// The backup, through a follower; then a change it does not hold.
	follower := n2
	if waitLeader(t, n2, n2.addr.String(), "") == n2.id() {
		follower = n1
	}
	file, trailer := takeBackup(ctx, t, c.mgmt(t, follower.addr.String()))
	t.Logf("backup of %d bytes at revision %d", trailer.Size, trailer.Revision)
	if _, err := c.mgmt(t, addr0).RotateRegisterTicket(ctx, &api.RotateRegisterTicketRequest{PreviousTicket: ticket.Ticket}); err != nil {
		t.Fatalf("RotateRegisterTicket: %v", err)
	}

	// Two members gone for good: quorum is lost.
	for _, n := range []*testNode{n0, n1} {
		n.stopCurator()
		n.member.Stop()
	}

	// The survivor is handed the backup and restarts, as after
	// NodeManagement.Recover.
	start := time.Now()
	rev, err := consensus.StageRestore(n2.member.Config.DataDir, bytes.NewReader(file), trailer.Size, trailer.Sha256, c.ca)
	if err != nil {
		t.Fatalf("StageRestore: %v", err)
	}
	if rev != trailer.Revision {
		t.Errorf("StageRestore says revision %d, the backup's trailer %d", rev, trailer.Revision)
	}
	n2.stopCurator()
	n2.member.Stop()
	n2.member.Start(t)
	n2.startCurator(t, ports.option())
	addr2 := n2.addr.String()
	m := c.mgmt(t, addr2)
	var after *api.GetNodesResponse
	fixture.Eventually(t, time.Minute, "GetNodes on the restored cluster", func() error {
		after, err = m.GetNodes(ctx, &api.GetNodesRequest{})
		return err
	})
	t.Logf("restored cluster serves %v after the restore was staged", time.Since(start))

	// The records are the backup's, but for the lost members.
	want := map[string]*api.Node{}
	for _, n := range before.Nodes {
		want[n.Id] = n
	}
	for _, lost := range []*testNode{n0, n1} {
		want[lost.id()].State = api.NodeState_NODE_STATE_DECOMMISSIONED
		want[lost.id()].Roles = &api.NodeRoles{}
	}
	for _, n := range after.Nodes {
		if diff := cmp.Diff(want[n.Id], n, protocmp.Transform(),
			protocmp.IgnoreFields(&api.Node{}, "health", "last_heartbeat_unix_nanos")); diff != "" {
			t.Errorf("node %s after the restore differs (-want +got):\n%s", n.Id, diff)
		}
	}
	if len(after.Nodes) != len(before.Nodes) {
		t.Errorf("restored cluster has %d nodes, the backup %d", len(after.Nodes), len(before.Nodes))
	}
	got, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil || !bytes.Equal(got.Ticket, ticket.Ticket) {
		t.Errorf("register ticket after the restore = %x, %v, want the backup's %x", got.GetTicket(), err, ticket.Ticket)
	}

	// etcd: one member, a new peer CA, no certificate of a lost member,
	// the restore finished.
	st := n2.member.WaitVoter(t)
	if members, err := st.Members(ctx); err != nil || !slices.Equal(members, []string{n2.id()}) {
		t.Errorf("members after the restore = %v, %v, want only %s", members, err, n2.id())
	}
	if bytes.Equal(peerCACertificate(ctx, t, n2), oldPeerCA) {
		t.Errorf("the restored cluster kept the peer CA of the lost one")
	}
	for _, lost := range []*testNode{n0, n1} {
		resp, err := st.Client().Get(ctx, consensus.PeerPKINamespace.CertificateKey("etcd-peer-"+lost.id()))
		if err != nil || len(resp.Kvs) != 0 {
			t.Errorf("peer certificate of lost member %s after the restore: %v, %v, want none", lost.id(), resp, err)
		}
	}
	if r, _, err := consensus.PendingRestore(ctx, st.Client()); err != nil || r != nil {
		t.Errorf("PendingRestore after the curator started = %+v, %v, want none", r, err)
	}

	// The worker carries on with its certificate; a lost member is
	// refused.
	if _, err := worker.client(t, addr2).Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
		t.Errorf("Heartbeat of the worker after the restore: %v", err)
	}
	if _, err := n0.client(t, addr2).Heartbeat(ctx, &api.HeartbeatRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Heartbeat of lost member %s after the restore = %v, want PermissionDenied", n0.id(), err)
	}

	// The owner grows the consensus again.
	c.addMember(t, addr2, newTestNode(t), ports)
	if members, err := st.Members(ctx); err != nil || len(members) != 2 {
		t.Errorf("members after adding one to the restored cluster = %v, %v, want 2", members, err)
	}
}

// peerCACertificate reads the etcd peer CA's certificate through n's
// member.
func peerCACertificate(ctx context.Context, t *testing.T, n *testNode) []byte {
	t.Helper()
	resp, err := n.member.WaitVoter(t).Client().Get(ctx, consensus.PeerPKINamespace.CertificateKey("ca"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading the peer CA: %v, %v", resp, err)
	}
	return resp.Kvs[0].Value
}
