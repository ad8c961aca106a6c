package curator

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// aaa implements api.AAAServer. Every curator serves it itself: the proof
// is bound to the TLS session between the owner and this curator, which a
// forwarded call would not share.
type aaa struct {
	api.UnimplementedAAAServer
	*curator
}

// Escrow implements AAA.Escrow. Anyone may call it, so the exchange is
// bounded in time: the hello must come within escrowHelloTimeout, and the
// whole exchange end within escrowTimeout; then the stream ends with
// DeadlineExceeded.
func (a aaa) Escrow(srv grpc.BidiStreamingServer[api.EscrowFromClient, api.EscrowFromServer]) error {
	ctx := srv.Context()
	stop := rpc.Expire(ctx, a.opts.limits.escrowTimeout, "the escrow exchange did not finish in time")
	defer stop()
	stopHello := rpc.Expire(ctx, a.opts.limits.escrowHelloTimeout, "no hello came in time")
	msg, err := srv.Recv()
	stopHello()
	if err != nil {
		return fmt.Errorf("when receiving the hello: %w", err)
	}
	hello := msg.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "the first message must be a hello")
	}
	if len(hello.OwnerPublicKey) != ed25519.PublicKeySize {
		return status.Errorf(codes.InvalidArgument, "owner public key is %d bytes, want %d", len(hello.OwnerPublicKey), ed25519.PublicKeySize)
	}
	trust, _, err := a.readOwnerTrust(ctx)
	if err != nil {
		return err
	}
	owner := ed25519.PublicKey(trust.OwnerPublicKey)
	if !bytes.Equal(owner, hello.OwnerPublicKey) {
		return status.Errorf(codes.PermissionDenied, "the key %s is not the cluster owner's: it never was, or the owner key was rotated since", rpc.OwnerKeyFingerprint(hello.OwnerPublicKey))
	}

	nonce := make([]byte, rpc.EscrowNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("when drawing the escrow nonce: %w", err)
	}
	challenge := &api.EscrowFromServer{Step: &api.EscrowFromServer_Challenge_{Challenge: &api.EscrowFromServer_Challenge{Nonce: nonce}}}
	if err := srv.Send(challenge); err != nil {
		return fmt.Errorf("when sending the challenge: %w", err)
	}
	msg, err = srv.Recv()
	if err != nil {
		return fmt.Errorf("when receiving the proof: %w", err)
	}
	proof := msg.GetProof()
	if proof == nil {
		return status.Error(codes.InvalidArgument, "the second message must be a proof")
	}
	cs, ok := rpc.TLSConnectionState(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "escrow needs a TLS connection to bind the proof to")
	}
	payload, err := rpc.EscrowProofPayload(nonce, cs)
	if err != nil {
		return status.Errorf(codes.Internal, "when building the proof payload: %v", err)
	}
	if !ed25519.Verify(owner, payload, proof.Signature) {
		return status.Error(codes.PermissionDenied, "the proof's signature does not verify under the owner key")
	}
	cert, ca, err := a.issueOwnerCertificate(ctx, owner, trust)
	if err != nil {
		return err
	}
	result := &api.EscrowFromServer{Step: &api.EscrowFromServer_Result_{Result: &api.EscrowFromServer_Result{OwnerCertificate: cert, CaCertificate: ca}}}
	if err := srv.Send(result); err != nil {
		return fmt.Errorf("when sending the owner certificate: %w", err)
	}
	return nil
}
