package rpc

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/proto/api"
)

// followingLogs is a NodeManagement whose Logs sends one batch, then
// follows until its call ends, as `cairnctl logs -f` does, and returns nil
// then, as node/nodemanagement does.
type followingLogs struct {
	api.UnimplementedNodeManagementServer
}

func (followingLogs) Logs(_ *api.LogsRequest, srv grpc.ServerStreamingServer[api.LogsResponse]) error {
	if err := srv.Send(&api.LogsResponse{}); err != nil {
		return err
	}
	<-srv.Context().Done()
	return nil
}

// ownerCert is an owner certificate of ca for key, with its serial.
type ownerCert struct {
	der    []byte
	serial *big.Int
}

func issueOwner(t *testing.T, ca *identitytest.CA, key ed25519.PrivateKey) ownerCert {
	t.Helper()
	der := ca.Issue(t, identity.OwnerCertificateTemplate(), key.Public().(ed25519.PublicKey))
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ownerCert{der: der, serial: cert.SerialNumber}
}

// TestJudgeOwners serves Management and NodeManagement with an owner trust
// that the test changes, and calls them with owner certificates over real
// TLS: a call is admitted only while the trust admits the certificate's
// key and serial, a follow stream ends when the trust stops admitting it,
// and methods other than the owner's do not consult the trust.
func TestJudgeOwners(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	var trust memory.Value[*api.OwnerTrust]
	addr := startServer(t, ca.Node(t), func(s *Server) {
		api.RegisterAAAServer(s, testAAA{})
		api.RegisterManagementServer(s, testManagement{})
		api.RegisterNodeManagementServer(s, followingLogs{})
		s.JudgeOwners(&trust)
		s.ownerWait = 200 * time.Millisecond
	})
	ownerKey := identitytest.NewKey(t)
	ownerPub := ownerKey.Public().(ed25519.PublicKey)
	first, second := issueOwner(t, ca, ownerKey), issueOwner(t, ca, ownerKey)
	conn := func(c ownerCert) *grpc.ClientConn {
		creds, err := OwnerCredentials(ownerKey, c.der, ca.DER())
		if err != nil {
			t.Fatalf("OwnerCredentials: %v", err)
		}
		return dial(t, addr, creds)
	}
	firstConn, secondConn := conn(first), conn(second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	getNodes := func(conn *grpc.ClientConn) error {
		_, err := api.NewManagementClient(conn).GetNodes(ctx, &api.GetNodesRequest{})
		return err
	}

	// Before the node knows the trust, no owner call passes: it waits
	// for the trust, then is refused. Escrow, which anyone may call, is not
	// the trust's to judge.
	if err := getNodes(firstConn); status.Code(err) != codes.Unavailable {
		t.Errorf("GetNodes before the trust is known = %v, want Unavailable", err)
	}
	escrow, err := LookupMethod("/cairn.api.AAA/Escrow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(ctx, firstConn, escrow); err != nil {
		t.Errorf("Escrow as the owner before the trust is known: %v", err)
	}

	revoke := func(serials ...*big.Int) *api.OwnerTrust {
		tr := &api.OwnerTrust{OwnerPublicKey: ownerPub}
		for _, s := range serials {
			tr.Revoked = append(tr.Revoked, &api.RevokedOwnerCertificate{Serial: s.Bytes()})
		}
		return tr
	}
	rotated := &api.OwnerTrust{OwnerPublicKey: identitytest.NewKey(t).Public().(ed25519.PublicKey)}
	for _, tc := range []struct {
		name   string
		trust  *api.OwnerTrust
		conn   *grpc.ClientConn
		serial *big.Int
		want   api.OwnerCertificateRefusal_Reason // UNSPECIFIED: admitted
	}{
		{"current key", revoke(), firstConn, first.serial, api.OwnerCertificateRefusal_REASON_UNSPECIFIED},
		{"revoked serial", revoke(first.serial), firstConn, first.serial, api.OwnerCertificateRefusal_REASON_REVOKED},
		{"another serial revoked", revoke(first.serial), secondConn, second.serial, api.OwnerCertificateRefusal_REASON_UNSPECIFIED},
		{"key rotated", rotated, secondConn, second.serial, api.OwnerCertificateRefusal_REASON_KEY_ROTATED},
	} {
		trust.Set(tc.trust)
		err := getNodes(tc.conn)
		if tc.want == api.OwnerCertificateRefusal_REASON_UNSPECIFIED {
			if err != nil {
				t.Errorf("%s: GetNodes = %v, want it admitted", tc.name, err)
			}
			continue
		}
		r := OwnerRefusalOf(err)
		if status.Code(err) != codes.PermissionDenied || r.GetReason() != tc.want || !bytes.Equal(r.GetSerial(), tc.serial.Bytes()) {
			t.Errorf("%s: GetNodes = %v with refusal %v, want PermissionDenied %s for serial %x", tc.name, err, r, tc.want, tc.serial)
		}
	}

	// A follow stream ends, with the refusal, once the trust revokes its
	// certificate.
	trust.Set(revoke())
	stream, err := api.NewNodeManagementClient(firstConn).Logs(ctx, &api.LogsRequest{Follow: true})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first batch of Logs: %v", err)
	}
	start := time.Now()
	trust.Set(revoke(first.serial))
	_, err = stream.Recv()
	if r := OwnerRefusalOf(err); r.GetReason() != api.OwnerCertificateRefusal_REASON_REVOKED {
		t.Errorf("Logs stream after the revocation ended with %v, want PermissionDenied REVOKED", err)
	}
	t.Logf("Logs stream ended %v after the trust changed", time.Since(start))
}

// TestOwnerCallWaitsForTrust calls a node that does not know the owner
// trust yet, as right after a reboot: the call waits, and is answered once
// the node learns the trust, instead of failing with Unavailable.
func TestOwnerCallWaitsForTrust(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	var trust memory.Value[*api.OwnerTrust]
	addr := startServer(t, ca.Node(t), func(s *Server) {
		api.RegisterManagementServer(s, testManagement{})
		s.JudgeOwners(&trust)
	})
	ownerKey := identitytest.NewKey(t)
	creds, err := OwnerCredentials(ownerKey, issueOwner(t, ca, ownerKey).der, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	conn := dial(t, addr, creds)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const learnt = 300 * time.Millisecond
	timer := time.AfterFunc(learnt, func() {
		trust.Set(&api.OwnerTrust{OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey)})
	})
	defer timer.Stop()
	start := time.Now()
	if _, err := api.NewManagementClient(conn).GetNodes(ctx, &api.GetNodesRequest{}); err != nil {
		t.Fatalf("GetNodes while the node learns the trust %v after the call: %v, want it answered", learnt, err)
	}
	if took := time.Since(start); took < learnt {
		t.Errorf("GetNodes answered after %v, before the node knew the trust (%v)", took, learnt)
	}
}

// TestJudgeForwardedOwner forwards owner calls through a trusted node to a
// server with an owner trust: the certificate the forwarder names is
// judged there as if the owner had dialled the server itself.
func TestJudgeForwardedOwner(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	forwarder := ca.Node(t)
	var trust memory.Value[*api.OwnerTrust]
	addr := startServer(t, ca.Node(t), func(s *Server) {
		registerTestServices(s)
		s.TrustForwarders(func(context.Context, identity.Peer, identity.Peer) error { return nil })
		s.JudgeOwners(&trust)
	})
	conn := dial(t, addr, NodeCredentials(forwarder))
	ownerKey := identitytest.NewKey(t)
	ownerPub := ownerKey.Public().(ed25519.PublicKey)
	cert := issueOwner(t, ca, ownerKey)
	trust.Set(&api.OwnerTrust{
		OwnerPublicKey: ownerPub,
		Revoked:        []*api.RevokedOwnerCertificate{{Serial: cert.serial.Bytes()}},
	})
	notAfter := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, tc := range []struct {
		name string
		peer identity.Peer
		want codes.Code
	}{
		{"revoked certificate", identity.Peer{Kind: identity.PeerOwner, PublicKey: ownerPub, Serial: cert.serial, NotAfter: notAfter}, codes.PermissionDenied},
		{"another certificate", identity.Peer{Kind: identity.PeerOwner, PublicKey: ownerPub, Serial: big.NewInt(7), NotAfter: notAfter}, codes.OK},
		// A forwarder that names no certificate has the key judged alone.
		{"no certificate named", identity.Peer{Kind: identity.PeerOwner, PublicKey: ownerPub}, codes.OK},
		{"another key", identity.Peer{Kind: identity.PeerOwner, PublicKey: identitytest.NewKey(t).Public().(ed25519.PublicKey), Serial: big.NewInt(7), NotAfter: notAfter}, codes.PermissionDenied},
	} {
		_, err := forwardCall(conn, tc.peer)
		if status.Code(err) != tc.want {
			t.Errorf("%s: forwarded GetNodes = %v, want %v", tc.name, err, tc.want)
		}
	}

	// A certificate named for a caller that has none is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, ForwardedCertificateHeader, "07 1700000000")
	m, err := LookupMethod("/cairn.api.Curator/JoinNode")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(WithForwardedPeer(ctx, identity.Peer{}), conn, m); status.Code(err) != codes.InvalidArgument {
		t.Errorf("anonymous caller forwarded with a certificate = %v, want InvalidArgument", err)
	}
}

// FuzzDecodeForwardedCertificate feeds arbitrary header values to the
// decoder: it must never panic, and whatever it accepts must encode back
// to the same value.
func FuzzDecodeForwardedCertificate(f *testing.F) {
	for _, p := range []identity.Peer{
		{Serial: big.NewInt(1), NotAfter: time.Unix(0, 0)},
		{Serial: new(big.Int).Lsh(big.NewInt(1), 126), NotAfter: time.Unix(1800000000, 0)},
	} {
		f.Add(encodeForwardedCertificate(p))
	}
	f.Add("00ff 12")
	f.Add("ff -1")
	f.Add("ff 012")
	f.Add("FF 12")
	f.Fuzz(func(t *testing.T, v string) {
		serial, notAfter, err := decodeForwardedCertificate(v)
		if err != nil {
			return
		}
		if got := encodeForwardedCertificate(identity.Peer{Serial: serial, NotAfter: notAfter}); got != v {
			t.Errorf("encodeForwardedCertificate(decodeForwardedCertificate(%q)) = %q", v, got)
		}
	})
}

// rotationManagement checks RotateOwnerKey proofs as a curator would.
type rotationManagement struct {
	api.UnimplementedManagementServer
}

func (rotationManagement) RotateOwnerKey(srv grpc.ClientStreamingServer[api.RotateOwnerKeyRequest, api.RotateOwnerKeyResponse]) error {
	req, err := srv.Recv()
	if err != nil {
		return err
	}
	p, _ := PeerFromContext(srv.Context())
	cs, ok := TLSConnectionState(srv.Context())
	if !ok {
		return status.Error(codes.Internal, "no TLS state")
	}
	next := ed25519.PublicKey(req.GetNewOwnerPublicKey())
	payload, err := OwnerRotationProofPayload(p.PublicKey, next, cs)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if !ed25519.Verify(next, payload, req.GetProof()) {
		return status.Error(codes.PermissionDenied, "proof does not check out")
	}
	return srv.SendAndClose(&api.RotateOwnerKeyResponse{})
}

// TestOwnerRotationProofBindsSession signs a rotation proof from the
// client's side of a session, which the server checks from its own side,
// then replays it on another connection and passes an Escrow-style proof
// off as one: the server refuses both.
func TestOwnerRotationProofBindsSession(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	addr := startServer(t, ca.Node(t), func(s *Server) {
		api.RegisterManagementServer(s, rotationManagement{})
	})
	ownerKey := identitytest.NewKey(t)
	creds, err := OwnerCredentials(ownerKey, issueOwner(t, ca, ownerKey).der, ca.DER())
	if err != nil {
		t.Fatal(err)
	}
	next := identitytest.NewKey(t)
	nextPub := next.Public().(ed25519.PublicKey)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rotate := func(conn *grpc.ClientConn, proof func(cs tls.ConnectionState) []byte) error {
		stream, err := api.NewManagementClient(conn).RotateOwnerKey(ctx)
		if err != nil {
			return err
		}
		cs, ok := TLSConnectionState(stream.Context())
		if !ok {
			t.Fatal("client stream has no TLS state")
		}
		if err := stream.Send(&api.RotateOwnerKeyRequest{NewOwnerPublicKey: nextPub, Proof: proof(cs)}); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		_, err = stream.CloseAndRecv()
		return err
	}
	var captured []byte
	honest := func(cs tls.ConnectionState) []byte {
		payload, err := OwnerRotationProofPayload(ownerKey.Public().(ed25519.PublicKey), nextPub, cs)
		if err != nil {
			t.Fatalf("OwnerRotationProofPayload: %v", err)
		}
		captured = ed25519.Sign(next, payload)
		return captured
	}
	if err := rotate(dial(t, addr, creds), honest); err != nil {
		t.Fatalf("RotateOwnerKey with a proof of this session: %v", err)
	}
	replayed := captured
	if err := rotate(dial(t, addr, creds), func(tls.ConnectionState) []byte { return replayed }); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RotateOwnerKey replaying a proof of another session = %v, want PermissionDenied", err)
	}
	escrowStyle := func(cs tls.ConnectionState) []byte {
		payload, err := EscrowProofPayload(make([]byte, EscrowNonceSize), cs)
		if err != nil {
			t.Fatalf("EscrowProofPayload: %v", err)
		}
		return ed25519.Sign(next, payload)
	}
	if err := rotate(dial(t, addr, creds), escrowStyle); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RotateOwnerKey with an escrow proof = %v, want PermissionDenied", err)
	}
	if _, err := OwnerRotationProofPayload(nextPub, nextPub[:3], tls.ConnectionState{HandshakeComplete: true}); err == nil {
		t.Error("OwnerRotationProofPayload with a 3-byte key succeeded, want an error")
	}
}
