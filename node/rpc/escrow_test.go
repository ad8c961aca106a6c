package rpc

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/proto/api"
)

// escrowAAA runs the Escrow exchange against a fixed owner key, checking
// the proof as a curator would, and answers with an empty result.
type escrowAAA struct {
	api.UnimplementedAAAServer
	owner ed25519.PublicKey
}

func (e escrowAAA) Escrow(srv grpc.BidiStreamingServer[api.EscrowFromClient, api.EscrowFromServer]) error {
	hello, err := srv.Recv()
	if err != nil {
		return err
	}
	if !e.owner.Equal(ed25519.PublicKey(hello.GetHello().GetOwnerPublicKey())) {
		return status.Error(codes.PermissionDenied, "not the owner key")
	}
	nonce := make([]byte, EscrowNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return status.Errorf(codes.Internal, "drawing nonce: %v", err)
	}
	challenge := &api.EscrowFromServer_Challenge{Nonce: nonce}
	if err := srv.Send(&api.EscrowFromServer{Step: &api.EscrowFromServer_Challenge_{Challenge: challenge}}); err != nil {
		return err
	}
	proof, err := srv.Recv()
	if err != nil {
		return err
	}
	cs, ok := TLSConnectionState(srv.Context())
	if !ok {
		return status.Error(codes.Internal, "no TLS state")
	}
	payload, err := EscrowProofPayload(nonce, cs)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	if !ed25519.Verify(e.owner, payload, proof.GetProof().GetSignature()) {
		return status.Error(codes.PermissionDenied, "proof does not check out")
	}
	return srv.Send(&api.EscrowFromServer{Step: &api.EscrowFromServer_Result_{Result: &api.EscrowFromServer_Result{}}})
}

// TestEscrowProofBindsSession runs Escrow with a proof computed from the
// client's side of the TLS session, which the server checks from its own
// side, then replays that proof on another connection, where the server
// must refuse it.
func TestEscrowProofBindsSession(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	ownerKey := identitytest.NewKey(t)
	addr := startServer(t, ca.Node(t), func(s *Server) {
		api.RegisterAAAServer(s, escrowAAA{owner: ownerKey.Public().(ed25519.PublicKey)})
	})
	creds, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// escrow runs the exchange, signing with sign, and returns the
	// server's verdict.
	escrow := func(conn *grpc.ClientConn, sign func(nonce, payload []byte) []byte) error {
		stream, err := api.NewAAAClient(conn).Escrow(ctx)
		if err != nil {
			return err
		}
		hello := &api.EscrowFromClient_Hello{OwnerPublicKey: ownerKey.Public().(ed25519.PublicKey)}
		if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: hello}}); err != nil {
			return err
		}
		challenge, err := stream.Recv()
		if err != nil {
			return err
		}
		nonce := challenge.GetChallenge().GetNonce()
		cs, ok := TLSConnectionState(stream.Context())
		if !ok {
			t.Fatal("client stream has no TLS state")
		}
		payload, err := EscrowProofPayload(nonce, cs)
		if err != nil {
			t.Fatalf("EscrowProofPayload: %v", err)
		}
		proof := &api.EscrowFromClient_Proof{Signature: sign(nonce, payload)}
		if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Proof_{Proof: proof}}); err != nil {
			return err
		}
		result, err := stream.Recv()
		if err != nil {
			return err
		}
		if result.GetResult() == nil {
			t.Errorf("Escrow ended with %v, want a result", result)
		}
		return nil
	}

	var captured []byte
	honest := func(_, payload []byte) []byte {
		captured = ed25519.Sign(ownerKey, payload)
		return captured
	}
	if err := escrow(dial(t, addr, creds), honest); err != nil {
		t.Fatalf("Escrow with a proof of this session: %v", err)
	}
	// Replay on another connection: the old signature covers another
	// nonce and another session's keying material, and must be refused.
	first := captured
	replay := func(_, _ []byte) []byte { return first }
	if err := escrow(dial(t, addr, creds), replay); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Escrow replaying an old proof = %v, want PermissionDenied", err)
	}
	if _, err := EscrowProofPayload(make([]byte, 3), tls.ConnectionState{HandshakeComplete: true}); err == nil {
		t.Error("EscrowProofPayload with a 3-byte nonce succeeded, want an error")
	}
	if _, err := EscrowProofPayload(make([]byte, EscrowNonceSize), tls.ConnectionState{}); err == nil {
		t.Error("EscrowProofPayload without a handshake succeeded, want an error")
	}
}
