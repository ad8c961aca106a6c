package curator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// rotationTimeout bounds RotateOwnerKey's work once the proof checked out:
// storing the new key and issuing its certificate.
const rotationTimeout = 30 * time.Second

// ownerPeer returns the owner calling ctx's call.
func ownerPeer(ctx context.Context) (identity.Peer, error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerOwner {
		return identity.Peer{}, status.Error(codes.Unauthenticated, "the caller is not the owner")
	}
	return p, nil
}

// RotateOwnerKey implements Management.RotateOwnerKey. Every curator
// serves it itself: the proof is bound to the TLS session between the
// owner and this curator.
func (m management) RotateOwnerKey(srv grpc.ClientStreamingServer[api.RotateOwnerKeyRequest, api.RotateOwnerKeyResponse]) error {
	ctx := srv.Context()
	stop := rpc.Expire(ctx, m.opts.limits.escrowTimeout, "the rotation request did not come in time")
	req, err := srv.Recv()
	stop()
	if err != nil {
		return fmt.Errorf("when receiving the rotation request: %w", err)
	}
	p, err := ownerPeer(ctx)
	if err != nil {
		return err
	}
	next := ed25519.PublicKey(req.NewOwnerPublicKey)
	if len(next) != ed25519.PublicKeySize {
		return status.Errorf(codes.InvalidArgument, "new owner key is %d bytes, want %d", len(next), ed25519.PublicKeySize)
	}
	if next.Equal(p.PublicKey) {
		return status.Error(codes.InvalidArgument, "the new owner key is the current one")
	}
	cs, ok := rpc.TLSConnectionState(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "rotation needs a TLS connection to bind the proof to")
	}
	payload, err := rpc.OwnerRotationProofPayload(p.PublicKey, next, cs)
	if err != nil {
		return status.Errorf(codes.Internal, "when building the proof payload: %v", err)
	}
	if !ed25519.Verify(next, payload, req.Proof) {
		return status.Error(codes.PermissionDenied, "the proof's signature does not verify under the new owner key")
	}
	// Once the proof checked out, the rotation runs to its end even if the
	// caller goes away: it learns the outcome by escrowing with the new
	// key.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rotationTimeout)
	defer cancel()
	t, err := m.updateOwnerTrust(wctx, func(t *api.OwnerTrust) error {
		if !bytes.Equal(t.OwnerPublicKey, p.PublicKey) {
			return status.Errorf(codes.FailedPrecondition, "the owner key changed during this call (to %s): another rotation came first", rpc.OwnerKeyFingerprint(t.OwnerPublicKey))
		}
		t.OwnerPublicKey = next
		return nil
	})
	if err != nil {
		return err
	}
	m.log.Warningf("Owner key rotated from %s to %s; certificates of the old key are refused from now on", rpc.OwnerKeyFingerprint(p.PublicKey), rpc.OwnerKeyFingerprint(next))
	cert, ca, err := m.issueOwnerCertificate(wctx, next, t)
	if err != nil {
		return fmt.Errorf("the owner key was rotated, but issuing its certificate failed (escrow it with the new key): %w", err)
	}
	return srv.SendAndClose(&api.RotateOwnerKeyResponse{OwnerCertificate: cert, CaCertificate: ca})
}

// RevokeOwnerCertificate implements Management.RevokeOwnerCertificate.
func (m management) RevokeOwnerCertificate(ctx context.Context, req *api.RevokeOwnerCertificateRequest) (*api.RevokeOwnerCertificateResponse, error) {
	serial := req.Serial
	if len(serial) == 0 || len(serial) > 20 || serial[0] == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "serial %q is not a certificate serial number (1 to 20 bytes, no leading zero byte)", rpc.FormatSerial(serial))
	}
	p, err := ownerPeer(ctx)
	if err != nil {
		return nil, err
	}
	own := p.Serial != nil && bytes.Equal(p.Serial.Bytes(), serial)
	if own && !req.AllowOwn {
		return nil, status.Errorf(codes.FailedPrecondition, "owner certificate %s is the one this call is made with: once revoked, this client must escrow a new certificate with the owner key before its next call; ask again allowing that (allow_own) if it is meant", rpc.FormatSerial(serial))
	}
	rec, _, err := m.ownerCertificates(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	revoked := &api.RevokedOwnerCertificate{Serial: serial}
	for _, o := range rec.Certificates {
		if bytes.Equal(o.Serial, serial) && o.NotAfterUnixNanos > now.UnixNano() {
			revoked.NotAfterUnixNanos = o.NotAfterUnixNanos
		}
	}
	if revoked.NotAfterUnixNanos == 0 && own {
		revoked.NotAfterUnixNanos = p.NotAfter.UnixNano()
	}
	if revoked.NotAfterUnixNanos == 0 {
		return nil, status.Errorf(codes.NotFound, "the cluster issued no owner certificate %s that is still valid (GetOwnerTrust lists them)", rpc.FormatSerial(serial))
	}
	_, err = m.updateOwnerTrust(ctx, func(t *api.OwnerTrust) error {
		if isRevoked(t, serial) {
			return errUnchanged
		}
		t.Revoked = append(t.Revoked, revoked)
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.log.Warningf("Owner certificate %s revoked; refused from now on until it expires at %s", rpc.FormatSerial(serial), time.Unix(0, revoked.NotAfterUnixNanos).UTC().Format(time.RFC3339))
	return &api.RevokeOwnerCertificateResponse{Revoked: revoked}, nil
}

// GetOwnerTrust implements Management.GetOwnerTrust.
func (m management) GetOwnerTrust(ctx context.Context, _ *api.GetOwnerTrustRequest) (*api.GetOwnerTrustResponse, error) {
	t, _, err := m.readOwnerTrust(ctx)
	if err != nil {
		return nil, err
	}
	rec, _, err := m.ownerCertificates(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	t.Revoked = slices.DeleteFunc(t.Revoked, func(r *api.RevokedOwnerCertificate) bool { return r.NotAfterUnixNanos <= now })
	certs := slices.DeleteFunc(rec.Certificates, func(o *api.OwnerCertificate) bool { return o.NotAfterUnixNanos <= now })
	slices.SortStableFunc(certs, func(a, b *api.OwnerCertificate) int {
		return cmp.Compare(a.NotAfterUnixNanos, b.NotAfterUnixNanos)
	})
	return &api.GetOwnerTrustResponse{Trust: t, Certificates: certs}, nil
}
