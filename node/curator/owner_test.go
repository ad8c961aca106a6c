package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// trustBound is how long a node that follows the owner trust through a
// curator may take to refuse a certificate the cluster no longer trusts:
// one etcd watch delivery and one stream message, typically milliseconds
// (the tests log it). It only keeps a broken test from hanging.
const trustBound = 10 * time.Second

// ownerCluster is a cluster of a leader and a follower curator, with a
// third node, not a member, that serves NodeManagement judging owners by
// the owner trust it follows through the follower, as node/roleserve feeds
// node management.
type ownerCluster struct {
	*testCluster
	leader, follower string
	// nodeManagement is the third node's NodeManagement address; trust
	// is what it follows.
	nodeManagement string
	nodeID         string
	trust          *memory.Value[*api.OwnerTrust]
}

func newOwnerCluster(t *testing.T) *ownerCluster {
	t.Helper()
	ports := &peerPorts{}
	c := &ownerCluster{testCluster: newTestCluster(t, ports.option())}
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	c.leader = n0.addr.String()
	c.addMember(t, c.leader, newTestNode(t), ports)
	c.follower = c.nodes[1].addr.String()
	waitLeader(t, c.nodes[1], c.follower, "")

	n := newTestNode(t)
	c.enrol(t, c.leader, n)
	c.nodeID = n.id()
	c.trust = &memory.Value[*api.OwnerTrust]{}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := n.client(t, c.follower).WatchOwnerTrust(ctx, &api.WatchOwnerTrustRequest{})
	if err != nil {
		t.Fatalf("WatchOwnerTrust: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			res, err := stream.Recv()
			if err != nil {
				return
			}
			c.trust.Set(res.GetTrust())
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	srv := rpc.NewServer(n.ident)
	lt := logtree.New()
	// One entry, for streams that follow the logs to begin with.
	lt.LeveledFor("root").Info("node management serving")
	api.RegisterNodeManagementServer(srv, nodemanagement.New(nodemanagement.Config{LogTree: lt}))
	srv.JudgeOwners(c.trust)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(sctx, lis)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	c.nodeManagement = lis.Addr().String()
	return c
}

// refusal is the reason with which err refuses an owner certificate;
// UNSPECIFIED for any other outcome.
func refusal(err error) api.OwnerCertificateRefusal_Reason {
	return rpc.OwnerRefusalOf(err).GetReason()
}

// wantRefusedEverywhere calls GetNodes through the leader and the follower
// with creds, which must be refused for why at once, and reads logs on the
// node management site, which must refuse them within trustBound; it
// returns how long that took.
func (c *ownerCluster) wantRefusedEverywhere(t *testing.T, creds credentials.TransportCredentials, why api.OwnerCertificateRefusal_Reason) time.Duration {
	t.Helper()
	ctx := fixture.Context(t)
	start := time.Now()
	for _, addr := range []string{c.leader, c.follower} {
		_, err := api.NewManagementClient(dial(t, addr, creds)).GetNodes(ctx, &api.GetNodesRequest{})
		if status.Code(err) != codes.PermissionDenied || refusal(err) != why {
			t.Errorf("GetNodes via %s right after the change = %v, want PermissionDenied %s", addr, err, why)
		}
	}
	nm := api.NewNodeManagementClient(dial(t, c.nodeManagement, creds))
	var took time.Duration
	fixture.Eventually(t, trustBound, "node management refusing the certificate", func() error {
		err := readLogs(ctx, nm)
		if refusal(err) != why {
			return status.Errorf(codes.Unknown, "logs = %v, want refused for %s", err, why)
		}
		took = time.Since(start)
		return nil
	})
	return took
}

// readLogs reads the last entry of the node management site's logs: nil
// when the call is admitted.
func readLogs(ctx context.Context, nm api.NodeManagementClient) error {
	s, err := nm.Logs(ctx, &api.LogsRequest{Backlog: 1, WithChildren: true})
	if err == nil {
		_, err = s.Recv()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// wantAdmittedEverywhere calls GetNodes through both curators and reads
// logs on the node management site with creds, eventually admitted.
func (c *ownerCluster) wantAdmittedEverywhere(t *testing.T, creds credentials.TransportCredentials) {
	t.Helper()
	ctx := fixture.Context(t)
	for _, addr := range []string{c.leader, c.follower} {
		if _, err := api.NewManagementClient(dial(t, addr, creds)).GetNodes(ctx, &api.GetNodesRequest{}); err != nil {
			t.Errorf("GetNodes via %s: %v", addr, err)
		}
	}
	nm := api.NewNodeManagementClient(dial(t, c.nodeManagement, creds))
	fixture.Eventually(t, trustBound, "node management admitting the certificate", func() error {
		return readLogs(ctx, nm)
	})
}

// rotateOwnerKey calls RotateOwnerKey on conn, made with a certificate of
// current, with a proof of next; sign, when set, replaces the proof.
func rotateOwnerKey(ctx context.Context, t *testing.T, conn *grpc.ClientConn, current, next ed25519.PrivateKey, sign func([]byte) []byte) (*api.RotateOwnerKeyResponse, error) {
	t.Helper()
	stream, err := api.NewManagementClient(conn).RotateOwnerKey(ctx)
	if err != nil {
		return nil, err
	}
	cs, ok := rpc.TLSConnectionState(stream.Context())
	if !ok {
		t.Fatal("rotation stream has no TLS state")
	}
	nextPub := next.Public().(ed25519.PublicKey)
	payload, err := rpc.OwnerRotationProofPayload(current.Public().(ed25519.PublicKey), nextPub, cs)
	if err != nil {
		t.Fatalf("OwnerRotationProofPayload: %v", err)
	}
	proof := ed25519.Sign(next, payload)
	if sign != nil {
		proof = sign(payload)
	}
	// A refused stream may be closed before the request goes out; the
	// verdict comes with CloseAndRecv.
	_ = stream.Send(&api.RotateOwnerKeyRequest{NewOwnerPublicKey: nextPub, Proof: proof})
	return stream.CloseAndRecv()
}

// TestOwnerKeyRotation rotates the owner key through a follower: from the
// moment RotateOwnerKey returns, both curators refuse the old key's
// certificate, the node that follows the owner trust refuses it within
// one stream message (the time is logged), its open log stream ends, and
// Escrow refuses the old key; the new key's certificate works everywhere.
func TestOwnerKeyRotation(t *testing.T) {
	c := newOwnerCluster(t)
	ctx := fixture.Context(t)
	c.wantAdmittedEverywhere(t, c.owner)
	follow, err := api.NewNodeManagementClient(dial(t, c.nodeManagement, c.owner)).Logs(ctx, &api.LogsRequest{Follow: true, Backlog: 1, WithChildren: true})
	if err != nil {
		t.Fatalf("Logs -f: %v", err)
	}
	if _, err := follow.Recv(); err != nil {
		t.Fatalf("first batch of Logs -f: %v", err)
	}

	viaFollower := dial(t, c.follower, c.owner)
	next := identitytest.NewKey(t)
	for _, tc := range []struct {
		name string
		next ed25519.PrivateKey
		sign func([]byte) []byte
		want codes.Code
	}{
		{"the current key", c.ownerKey, nil, codes.InvalidArgument},
		{"a proof by another key", next, func(p []byte) []byte { return ed25519.Sign(c.ownerKey, p) }, codes.PermissionDenied},
	} {
		if _, err := rotateOwnerKey(ctx, t, viaFollower, c.ownerKey, tc.next, tc.sign); status.Code(err) != tc.want {
			t.Errorf("RotateOwnerKey to %s = %v, want %v", tc.name, err, tc.want)
		}
	}

	res, err := rotateOwnerKey(ctx, t, viaFollower, c.ownerKey, next, nil)
	if err != nil {
		t.Fatalf("RotateOwnerKey: %v", err)
	}
	took := c.wantRefusedEverywhere(t, c.owner, api.OwnerCertificateRefusal_REASON_KEY_ROTATED)
	t.Logf("the node following the owner trust refused the old key %v after RotateOwnerKey returned", took)
	if _, err := follow.Recv(); refusal(err) != api.OwnerCertificateRefusal_REASON_KEY_ROTATED {
		t.Errorf("open Logs -f stream after the rotation ended with %v, want PermissionDenied KEY_ROTATED", err)
	}
	if _, err := escrow(ctx, t, c.leader, c.ca, c.ownerKey, nil); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Escrow with the old key = %v, want PermissionDenied", err)
	}

	creds, err := rpc.OwnerCredentials(next, res.OwnerCertificate, res.CaCertificate)
	if err != nil {
		t.Fatalf("OwnerCredentials with the rotated certificate: %v", err)
	}
	c.wantAdmittedEverywhere(t, creds)
	if _, err := escrow(ctx, t, c.follower, c.ca, next, nil); err != nil {
		t.Errorf("Escrow with the new key: %v", err)
	}
	trust, err := api.NewManagementClient(dial(t, c.leader, creds)).GetOwnerTrust(ctx, &api.GetOwnerTrustRequest{})
	if err != nil {
		t.Fatalf("GetOwnerTrust: %v", err)
	}
	if !bytes.Equal(trust.GetTrust().GetOwnerPublicKey(), next.Public().(ed25519.PublicKey)) {
		t.Errorf("GetOwnerTrust names owner key %x, want the new one", trust.GetTrust().GetOwnerPublicKey())
	}
	if got := len(trust.GetCertificates()); got != 2 {
		t.Errorf("GetOwnerTrust lists %d certificates, want 2 (the first escrow's, the rotation's)", got)
	}
	// Another rotation from the old key is refused by the rpc layer.
	if _, err := rotateOwnerKey(ctx, t, viaFollower, c.ownerKey, identitytest.NewKey(t), nil); refusal(err) != api.OwnerCertificateRefusal_REASON_KEY_ROTATED {
		t.Errorf("RotateOwnerKey with the old key's certificate = %v, want PermissionDenied KEY_ROTATED", err)
	}
}

// TestOwnerCertificateRevocation revokes the owner certificate by its
// serial through a follower: it is refused by both curators at once and by
// the node that follows the owner trust within one stream message, while
// Escrow hands the same key a new certificate that works everywhere.
func TestOwnerCertificateRevocation(t *testing.T) {
	c := newOwnerCluster(t)
	ctx := fixture.Context(t)
	first, err := escrow(ctx, t, c.leader, c.ca, c.ownerKey, nil)
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	cert, err := x509.ParseCertificate(first.OwnerCertificate)
	if err != nil {
		t.Fatal(err)
	}
	serial := cert.SerialNumber.Bytes()
	m := c.mgmt(t, c.follower)

	for _, tc := range []struct {
		name string
		req  *api.RevokeOwnerCertificateRequest
		want codes.Code
	}{
		{"no serial", &api.RevokeOwnerCertificateRequest{}, codes.InvalidArgument},
		{"a leading zero byte", &api.RevokeOwnerCertificateRequest{Serial: append([]byte{0}, serial...)}, codes.InvalidArgument},
		{"a serial never issued", &api.RevokeOwnerCertificateRequest{Serial: []byte{7}}, codes.NotFound},
		{"the caller's own certificate", &api.RevokeOwnerCertificateRequest{Serial: serial}, codes.FailedPrecondition},
	} {
		if _, err := m.RevokeOwnerCertificate(ctx, tc.req); status.Code(err) != tc.want {
			t.Errorf("RevokeOwnerCertificate of %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	c.wantAdmittedEverywhere(t, c.owner)

	res, err := m.RevokeOwnerCertificate(ctx, &api.RevokeOwnerCertificateRequest{Serial: serial, AllowOwn: true})
	if err != nil {
		t.Fatalf("RevokeOwnerCertificate of the caller's own certificate, allowed: %v", err)
	}
	if got, want := res.GetRevoked().GetNotAfterUnixNanos(), cert.NotAfter.UnixNano(); got != want {
		t.Errorf("revocation expires at %d, want the certificate's end, %d", got, want)
	}
	took := c.wantRefusedEverywhere(t, c.owner, api.OwnerCertificateRefusal_REASON_REVOKED)
	t.Logf("the node following the owner trust refused the revoked certificate %v after RevokeOwnerCertificate returned", took)

	// The key itself is still the owner's: Escrow issues a new certificate,
	// with another serial.
	second, err := escrow(ctx, t, c.follower, c.ca, c.ownerKey, nil)
	if err != nil {
		t.Fatalf("Escrow after the revocation: %v", err)
	}
	renewed, err := x509.ParseCertificate(second.OwnerCertificate)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialNumber.Cmp(cert.SerialNumber) == 0 {
		t.Fatalf("Escrow after the revocation returned the revoked certificate")
	}
	creds, err := rpc.OwnerCredentials(c.ownerKey, second.OwnerCertificate, second.CaCertificate)
	if err != nil {
		t.Fatal(err)
	}
	c.wantAdmittedEverywhere(t, creds)
	m = api.NewManagementClient(dial(t, c.leader, creds))
	if _, err := m.RevokeOwnerCertificate(ctx, &api.RevokeOwnerCertificateRequest{Serial: serial}); err != nil {
		t.Errorf("revoking the revoked certificate again: %v", err)
	}
	trust, err := m.GetOwnerTrust(ctx, &api.GetOwnerTrustRequest{})
	if err != nil {
		t.Fatalf("GetOwnerTrust: %v", err)
	}
	if r := trust.GetTrust().GetRevoked(); len(r) != 1 || !bytes.Equal(r[0].GetSerial(), serial) {
		t.Errorf("GetOwnerTrust revokes %v, want only %x", r, serial)
	}
}

func TestUnexpiredRevocations(t *testing.T) {
	now := time.Now()
	revoked := []*api.RevokedOwnerCertificate{
		{Serial: []byte{1}, NotAfterUnixNanos: now.Add(-time.Second).UnixNano()},
		{Serial: []byte{2}, NotAfterUnixNanos: now.Add(time.Hour).UnixNano()},
		{Serial: []byte{3}, NotAfterUnixNanos: now.UnixNano()},
	}
	got := unexpiredRevocations(revoked, now)
	if len(got) != 1 || got[0].Serial[0] != 2 {
		t.Errorf("unexpiredRevocations kept %v, want only serial 02", got)
	}
	if len(revoked) != 3 || revoked[0].Serial[0] != 1 {
		t.Errorf("unexpiredRevocations changed its input: %v", revoked)
	}
}
