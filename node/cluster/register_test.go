package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
)

// runCurator serves a real curator for node on a loopback port and
// returns the port; it stops with the returned cancel or at the end of
// takeOwnership runs AAA.Escrow with the owner key and returns a
// Management client with the owner certificate.
func takeOwnership(t *testing.T, ctx context.Context, target string, caDER []byte, owner ed25519.PrivateKey) api.ManagementClient {
	t.Helper()
	creds, err := rpc.EphemeralCredentials(caDER, owner)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var res *api.EscrowFromServer_Result
	for deadline := time.Now().Add(time.Minute); res == nil; {
		res, err = escrow(ctx, conn, owner)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("Escrow: %v", err)
			}
			time.Sleep(200 * time.Millisecond) // the curator may not lead yet
		}
	}
	oc, err := rpc.OwnerCredentials(owner, res.GetOwnerCertificate(), res.GetCaCertificate())
	if err != nil {
		t.Fatal(err)
	}
	mconn, err := grpc.NewClient(target, grpc.WithTransportCredentials(oc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mconn.Close() })
	return api.NewManagementClient(mconn)
}

func escrow(ctx context.Context, conn *grpc.ClientConn, owner ed25519.PrivateKey) (*api.EscrowFromServer_Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := api.NewAAAClient(conn).Escrow(ctx)
	if err != nil {
		return nil, err
	}
	hello := &api.EscrowFromClient_Hello{OwnerPublicKey: owner.Public().(ed25519.PublicKey)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: hello}}); err != nil {
		return nil, err
	}
	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	cs, _ := rpc.TLSConnectionState(stream.Context())
	payload, err := rpc.EscrowProofPayload(msg.GetChallenge().GetNonce(), cs)
	if err != nil {
		return nil, err
	}
	proof := &api.EscrowFromClient_Proof{Signature: ed25519.Sign(owner, payload)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Proof_{Proof: proof}}); err != nil {
		return nil, err
	}
	msg, err = stream.Recv()
	if err != nil {
		return nil, err
	}
	return msg.GetResult(), nil
}

// TestRegisterApproveJoin forms a cluster the way nodes do: the first
// node bootstraps on a real etcd and serves a real curator; a second node
// registers with the ticket, waits, is approved by the owner, commits;
// after a reboot it joins through the curator, with the curator gone it
// starts cold, and once decommissioned it is refused and mounts nothing.
func TestRegisterApproveJoin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		conf   *api.ClusterConfiguration
		hasTPM bool
		mounts []string // first enrolment, join
	}{
		{
			name:   "defaults with TPMs",
			hasTPM: true,
			mounts: []string{"MountNew", "MountExisting"},
		},
		{
			name: "insecure, best effort without TPMs",
			conf: &api.ClusterConfiguration{
				StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE,
				TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
			},
			mounts: []string{"MountNewInsecure", "MountExistingInsecure"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testRegisterApproveJoin(t, tc.conf, tc.hasTPM, tc.mounts)
		})
	}
}

func testRegisterApproveJoin(t *testing.T, conf *api.ClusterConfiguration, hasTPM bool, mounts []string) {
	ctx := fixture.Context(t)

	// The first node bootstraps.
	ownerPub, owner, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	first := newTestNode(t)
	if !hasTPM {
		first.tpm = noTPM
	}
	first.boot(t, &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{
			OwnerPublicKey:              ownerPub,
			InitialClusterConfiguration: conf,
		},
	}}, 0)
	fm := first.waitMembership(t)
	firstID := fm.ClusterDirectory.GetNodes()[0].GetId()
	first.waitMarker(t, marker.Bootstrapped, "node", firstID)
	firstNode, err := readIdentity(first.storage.st.Root)
	if err != nil {
		t.Fatal(err)
	}
	port, target := first.curatorPort, first.curatorTarget()
	ca := firstNode.CACertificate().Raw
	mgmt := takeOwnership(t, ctx, target, ca, owner)
	ticket, err := mgmt.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}

	// A wrong ticket is refused, and the node says so.
	params := &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{
		ClusterRegister: &api.NodeParameters_ClusterRegister{
			RegisterTicket:   []byte("not the ticket"),
			ClusterDirectory: fm.ClusterDirectory,
			CaCertificate:    ca,
		},
	}}
	second := newTestNode(t)
	if !hasTPM {
		second.tpm = noTPM
	}
	second.boot(t, params, port)
	t.Logf("%s", second.waitMarker(t, marker.Refused).Get("reason"))

	// With the right ticket it registers and waits for approval.
	params.GetClusterRegister().RegisterTicket = ticket.GetTicket()
	second.boot(t, params, port)
	id := second.waitMarker(t, marker.WaitingForApproval).Get("node")
	second.waitMarker(t, marker.Registering, "node", id)
	// The first MountNew fails: enrolment restarts and goes on without
	// committing again, which the curator would refuse.
	second.storage.mu.Lock()
	second.storage.failNext = errors.New("simulated disk failure")
	second.storage.mu.Unlock()
	if _, err := mgmt.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("ApproveNode(%s): %v", id, err)
	}
	sm := second.waitMembership(t)
	second.waitMarker(t, marker.Committed, "node", id)
	if sm.Credentials.ID() != id || sm.Bootstrap != nil || sm.InitialRoles != nil {
		t.Errorf("committed Membership = %+v, want credentials of %s only", sm, id)
	}
	sc := second.sealedConfiguration(t)
	if sc.GetNodeId() != id || validateSealed(sc) != nil {
		t.Errorf("sealed configuration = %v, want a valid one of node %s", sc, id)
	}
	if d := cmp.Diff([]string{mounts[0], mounts[0]}, second.storage.mountCalls()); d != "" {
		t.Errorf("mounts when committing differ (-want +got):\n%s", d)
	}

	// Reboot: it joins through the curator.
	second.boot(t, params, port)
	jm := second.waitMembership(t)
	second.waitMarker(t, marker.Joined, "node", id, "via", "curator")
	if jm.Credentials.ID() != id {
		t.Errorf("joined as %s, want %s", jm.Credentials.ID(), id)
	}
	if d := cmp.Diff(mounts[1:], second.storage.mountCalls()); d != "" {
		t.Errorf("mounts when joining differ (-want +got):\n%s", d)
	}

	// Cluster gone: after trying for a while, a cold start.
	first.cancel()
	second.boot(t, params, port)
	second.waitMembership(t)
	second.waitMarker(t, marker.Joined, "node", id, "via", "cold-start")

	// The first node comes back, alone in its directory: a cold start too.
	// Decommissioned, the second is refused and mounts nothing.
	second.cancel()
	first.boot(t, nil, port)
	first.waitMarker(t, marker.Joined, "node", firstID, "via", "cold-start")
	mgmt = takeOwnership(t, ctx, target, ca, owner)
	if _, err := mgmt.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	second.boot(t, params, port)
	t.Logf("%s", second.waitMarker(t, marker.Refused).Get("reason"))
	time.Sleep(time.Second)
	if calls := second.storage.mountCalls(); len(calls) != 0 {
		t.Errorf("a refused node mounted %v, want nothing", calls)
	}
	if there, err := second.storage.st.Root.ESP.Cairn.Refusal.Exists(); err != nil || !there {
		t.Errorf("refusal recorded on the ESP = %v, %v; want it there", there, err)
	}

	// The cluster gone, the refused node boots again: it remembers the
	// refusal, and nobody answering is no reason to start cold.
	first.cancel()
	second.boot(t, params, port)
	second.waitLog(t, "A curator refused this node before", logtree.WARNING)
	time.Sleep(3 * fastTiming.coldStartAfter)
	if calls := second.storage.mountCalls(); len(calls) != 0 {
		t.Errorf("a node refused on an earlier boot mounted %v with nobody answering, want nothing", calls)
	}
}

// TestDecommissionedWhileOff registers a node, powers it off before the
// owner approves it, and decommissions it meanwhile: booted again, it
// registers with its kept keys, learns from CommitNode that it is
// decommissioned, says so once, and stops asking instead of waiting for an
// approval that can never come.
func TestDecommissionedWhileOff(t *testing.T) {
	ctx := fixture.Context(t)
	c := newRegisterCluster(t, ctx)
	mgmt, params := c.mgmt, c.params

	second := newTestNode(t)
	second.boot(t, params, c.port)
	id := second.waitMarker(t, marker.WaitingForApproval).Get("node")
	second.cancel() // powered off
	if _, err := mgmt.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: id}); err != nil {
		t.Fatalf("DecommissionNode(%s): %v", id, err)
	}

	second.boot(t, params, c.port)
	second.waitMarker(t, marker.Decommissioned, "node", id)
	// It asks no more: in ten polls' time nothing more is logged.
	entries := func() int {
		r, err := second.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return len(r.Backlog)
	}
	before := entries()
	time.Sleep(10 * fastTiming.approvalPoll)
	if after := entries(); after != before {
		t.Errorf("the decommissioned node logged %d more entries after saying so, want none: it is still asking", after-before)
	}
	if m, _ := second.membership.Watch().Get(ctx, event.BacklogOnly[*roleserve.Membership]()); m != nil {
		t.Errorf("the decommissioned node handed over a membership: %+v", m)
	}
}
