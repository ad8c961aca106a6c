package curator

import (
	"context"
	"crypto/ed25519"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// escrowStream is one AAA.Escrow stream on a TLS session of its own, past
// the hello: it holds the challenge the curator sent.
type escrowStream struct {
	stream grpc.BidiStreamingClient[api.EscrowFromClient, api.EscrowFromServer]
	nonce  []byte
	// payload is what the owner signs on this stream.
	payload []byte
}

// openEscrow opens a new connection to the curator at addr, says hello
// with the owner key and reads the challenge.
func openEscrow(ctx context.Context, t *testing.T, c *testCluster, addr string) *escrowStream {
	t.Helper()
	creds, err := rpc.EphemeralCredentials(c.ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.NewAAAClient(dial(t, addr, creds)).Escrow(ctx)
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	hello := &api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: &api.EscrowFromClient_Hello{OwnerPublicKey: c.ownerKey.Public().(ed25519.PublicKey)}}}
	if err := s.Send(hello); err != nil {
		t.Fatalf("sending hello: %v", err)
	}
	msg, err := s.Recv()
	if err != nil {
		t.Fatalf("receiving the challenge: %v", err)
	}
	cs, ok := rpc.TLSConnectionState(s.Context())
	if !ok {
		t.Fatal("escrow stream has no TLS state")
	}
	payload, err := rpc.EscrowProofPayload(msg.GetChallenge().GetNonce(), cs)
	if err != nil {
		t.Fatal(err)
	}
	return &escrowStream{stream: s, nonce: msg.GetChallenge().GetNonce(), payload: payload}
}

// prove sends sig as the proof and returns the curator's answer.
func (e *escrowStream) prove(sig []byte) (*api.EscrowFromServer_Result, error) {
	proof := &api.EscrowFromClient{Step: &api.EscrowFromClient_Proof_{Proof: &api.EscrowFromClient_Proof{Signature: sig}}}
	if err := e.stream.Send(proof); err != nil {
		return nil, err
	}
	msg, err := e.stream.Recv()
	if err != nil {
		return nil, err
	}
	return msg.GetResult(), nil
}

// TestEscrowReplay plays a man in the middle against the real curator:
// a real proof, made by the owner key for one TLS session, is replayed on
// another session, as it is and re-made for the other session's nonce
// (the relay of a challenge), and both are refused; the proof is then
// accepted on the session it was made for, showing that it was genuine.
func TestEscrowReplay(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()

	victim := openEscrow(ctx, t, c, addr)
	genuine := ed25519.Sign(c.ownerKey, victim.payload)

	replayed := openEscrow(ctx, t, c, addr)
	if _, err := replayed.prove(genuine); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a proof replayed on another TLS session = %v, want PermissionDenied", err)
	}

	// The attacker relays its own challenge to the owner, who signs it
	// within the owner's session: still bound to the wrong session.
	relayed := openEscrow(ctx, t, c, addr)
	victimState, _ := rpc.TLSConnectionState(victim.stream.Context())
	forged, err := rpc.EscrowProofPayload(relayed.nonce, victimState)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := relayed.prove(ed25519.Sign(c.ownerKey, forged)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a proof of a relayed challenge, bound to the owner's session = %v, want PermissionDenied", err)
	}

	res, err := victim.prove(genuine)
	if err != nil || len(res.GetOwnerCertificate()) == 0 {
		t.Errorf("the genuine proof on its own session = %v, %v; want an owner certificate", res, err)
	}
}
