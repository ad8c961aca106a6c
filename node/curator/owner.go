package curator

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	etcdvalue "cairn.dev/cairn/pkg/event/etcd"
	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// The owner's credentials. The cluster trusts one owner key at a time, and
// refuses owner certificates it revoked before they expire; both are the
// owner trust (api.OwnerTrust), one etcd key that every curator's rpc
// server reads at each owner call (rpc.Server.JudgeOwners: a linearizable
// read, so the call after a change is judged by it on every curator) and
// that WatchOwnerTrust streams to the other nodes:
//
//	RotateOwnerKey ──txn──▶ owner/trust ◀──read per call── rpc layer of
//	RevokeOwnerCertificate ──txn──▶ │                       every curator
//	                                └──watch──▶ WatchOwnerTrust ──▶ nodes
//	Escrow, RotateOwnerKey ──issue──▶ pki "owner" ──record──▶ owner/certificates
//
// owner/public_key keeps the key the cluster was bootstrapped with, which
// Bootstrap compares when it runs again; until the first curator has
// created owner/trust from it (ensureOwnerTrust, at start), the handlers
// here read it in its place.
const (
	// ownerTrustKey holds the api.OwnerTrust.
	ownerTrustKey = "owner/trust"
	// ownerCertificatesKey holds the private.OwnerCertificates the
	// curator issued and that have not expired.
	ownerCertificatesKey = "owner/certificates"
)

// ownerWriteAttempts bounds how often a write of the owner's state is
// tried again when another one came in between.
const ownerWriteAttempts = 5

// rotationTimeout bounds RotateOwnerKey's work once the proof checked out:
// storing the new key and issuing its certificate.
const rotationTimeout = 30 * time.Second

// newOwnerTrustValue follows the owner trust in etcd through cl, the
// curator's namespace. A missing key reads as nil.
func newOwnerTrustValue(cl etcdvalue.Client) event.Watchable[*api.OwnerTrust] {
	return etcdvalue.NewValue(cl, ownerTrustKey, decodeOwnerTrust)
}

// decodeOwnerTrust decodes the owner trust key; a missing key is nil.
func decodeOwnerTrust(kv *mvccpb.KeyValue) (*api.OwnerTrust, error) {
	if kv.Version == 0 {
		return nil, nil
	}
	t := &api.OwnerTrust{}
	if err := proto.Unmarshal(kv.Value, t); err != nil {
		return nil, fmt.Errorf("when decoding the owner trust: %w", err)
	}
	if len(t.OwnerPublicKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the stored owner trust holds a %d-byte owner key", len(t.OwnerPublicKey))
	}
	return t, nil
}

// ensureOwnerTrust creates the owner trust from the bootstrap owner key
// when the cluster has none yet, then is done. It is a child runnable of
// the curator, so that a curator without etcd quorum serves all the same.
func (c *curator) ensureOwnerTrust(ctx context.Context) error {
	if err := c.createOwnerTrust(ctx); err != nil {
		// Also when etcd holds no cluster yet (FailedPrecondition): on a
		// node, Bootstrap runs before the curator; the supervisor tries
		// again after a while.
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// ownerTrustWait is how long a starting curator waits for etcd to create
// the owner trust of a new cluster before it serves anyway.
const ownerTrustWait = 5 * time.Second

// createOwnerTrust stores the owner trust made of the bootstrap owner key
// when the cluster has none yet.
func (c *curator) createOwnerTrust(ctx context.Context) error {
	t, rev, err := c.readOwnerTrust(ctx)
	if err != nil {
		return err
	}
	if rev == 0 {
		if _, err := c.putOwnerTrust(ctx, t, 0); err != nil {
			return err
		}
	}
	return nil
}

// readOwnerTrust reads the owner trust and the revision that last wrote
// it: 0 when no curator created it yet, in which case it is made of the
// bootstrap owner key alone.
func (c *curator) readOwnerTrust(ctx context.Context) (*api.OwnerTrust, int64, error) {
	resp, err := c.etcd.Txn(ctx).Then(clientv3.OpGet(ownerTrustKey), clientv3.OpGet(ownerKey)).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the owner trust: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		t, err := decodeOwnerTrust(kvs[0])
		if err != nil {
			return nil, 0, err
		}
		return t, kvs[0].ModRevision, nil
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, 0, status.Error(codes.FailedPrecondition, "the cluster has no owner key: it was not bootstrapped")
	}
	return &api.OwnerTrust{OwnerPublicKey: kvs[0].Value}, 0, nil
}

// putOwnerTrust stores t if the owner trust is still the one of revision
// rev (0: none), and says whether it was.
func (c *curator) putOwnerTrust(ctx context.Context, t *api.OwnerTrust, rev int64) (bool, error) {
	b, err := proto.Marshal(t)
	if err != nil {
		return false, fmt.Errorf("when encoding the owner trust: %w", err)
	}
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(ownerTrustKey), "=", rev)).
		Then(clientv3.OpPut(ownerTrustKey, string(b))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("when storing the owner trust: %w", err)
	}
	return resp.Succeeded, nil
}

// updateOwnerTrust applies change to the owner trust and stores the
// result, reading again when another write came in between. change
// returns errUnchanged to store nothing.
func (c *curator) updateOwnerTrust(ctx context.Context, change func(t *api.OwnerTrust) error) (*api.OwnerTrust, error) {
	for range ownerWriteAttempts {
		t, rev, err := c.readOwnerTrust(ctx)
		if err != nil {
			return nil, err
		}
		t = proto.Clone(t).(*api.OwnerTrust)
		t.Revoked = unexpiredRevocations(t.Revoked, time.Now())
		err = change(t)
		if errors.Is(err, errUnchanged) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		ok, err := c.putOwnerTrust(ctx, t, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			return t, nil
		}
	}
	return nil, status.Error(codes.Aborted, "the owner trust kept changing while it was being updated; retry")
}

// unexpiredRevocations drops the revocations of certificates that expired
// before now: the TLS handshake refuses those anyway.
func unexpiredRevocations(revoked []*api.RevokedOwnerCertificate, now time.Time) []*api.RevokedOwnerCertificate {
	return slices.DeleteFunc(slices.Clone(revoked), func(r *api.RevokedOwnerCertificate) bool {
		return r.NotAfterUnixNanos <= now.UnixNano()
	})
}

// isRevoked says whether t revokes serial.
func isRevoked(t *api.OwnerTrust, serial []byte) bool {
	return slices.ContainsFunc(t.GetRevoked(), func(r *api.RevokedOwnerCertificate) bool {
		return bytes.Equal(r.Serial, serial)
	})
}

// issueOwnerCertificate returns an owner certificate for key, the owner
// key of t, and the CA certificate, DER: the stored one while it is fresh
// (pki.Certificate.EnsureFresh), else a new one, also when the stored one
// is revoked or for another key (the key was rotated). It records what it
// returns in owner/certificates.
func (c *curator) issueOwnerCertificate(ctx context.Context, key ed25519.PublicKey, t *api.OwnerTrust) (certDER, caDER []byte, err error) {
	if err := c.checkClock(); err != nil {
		return nil, nil, err
	}
	want := ownerCertificate(c.ca, key, c.opts.ownerLifetime)
	certDER, caDER, err = issue(ctx, c.root, c.ca, want)
	if errors.Is(err, pki.ErrKeyMismatch) {
		certDER, err = want.Reissue(ctx, c.root)
	}
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, nil, fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	if isRevoked(t, cert.SerialNumber.Bytes()) {
		if certDER, err = want.Reissue(ctx, c.root); err != nil {
			return nil, nil, err
		}
		if cert, err = x509.ParseCertificate(certDER); err != nil {
			return nil, nil, fmt.Errorf("when parsing the owner certificate: %w", err)
		}
	}
	if caDER == nil {
		if caDER, err = c.ca.Ensure(ctx, c.root); err != nil {
			return nil, nil, fmt.Errorf("when loading the cluster CA: %w", err)
		}
	}
	if err := c.recordOwnerCertificate(ctx, cert); err != nil {
		return nil, nil, err
	}
	return certDER, caDER, nil
}

// ownerCertificates reads the record of issued owner certificates and the
// revision that last wrote it (0: none).
func (c *curator) ownerCertificates(ctx context.Context) (*private.OwnerCertificates, int64, error) {
	resp, err := c.etcd.Get(ctx, ownerCertificatesKey)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the owner certificates: %w", err)
	}
	rec := &private.OwnerCertificates{}
	if len(resp.Kvs) == 0 {
		return rec, 0, nil
	}
	if err := proto.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
		return nil, 0, fmt.Errorf("when decoding the owner certificates: %w", err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// recordOwnerCertificate adds cert to the record of issued owner
// certificates, unless it is there, and drops those that expired.
func (c *curator) recordOwnerCertificate(ctx context.Context, cert *x509.Certificate) error {
	entry := &api.OwnerCertificate{
		Serial:             cert.SerialNumber.Bytes(),
		OwnerPublicKey:     cert.PublicKey.(ed25519.PublicKey),
		NotBeforeUnixNanos: cert.NotBefore.UnixNano(),
		NotAfterUnixNanos:  cert.NotAfter.UnixNano(),
	}
	sameSerial := func(o *api.OwnerCertificate) bool { return bytes.Equal(o.Serial, entry.Serial) }
	for range ownerWriteAttempts {
		rec, rev, err := c.ownerCertificates(ctx)
		if err != nil {
			return err
		}
		now, had := time.Now().UnixNano(), len(rec.Certificates)
		kept := slices.DeleteFunc(rec.Certificates, func(o *api.OwnerCertificate) bool { return o.NotAfterUnixNanos <= now })
		known := slices.ContainsFunc(kept, sameSerial)
		if known && len(kept) == had {
			return nil
		}
		if !known {
			kept = append(kept, entry)
		}
		b, err := proto.Marshal(&private.OwnerCertificates{Certificates: kept})
		if err != nil {
			return fmt.Errorf("when encoding the owner certificates: %w", err)
		}
		resp, err := c.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(ownerCertificatesKey), "=", rev)).
			Then(clientv3.OpPut(ownerCertificatesKey, string(b))).
			Commit()
		if err != nil {
			return fmt.Errorf("when recording owner certificate %s: %w", rpc.FormatSerial(entry.Serial), err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return status.Error(codes.Aborted, "the record of owner certificates kept changing; retry")
}

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

// WatchOwnerTrust implements Curator.WatchOwnerTrust: the current owner
// trust, then each new one as etcd reports it. It takes one of the
// caller's Watch slots.
func (a nodeAPI) WatchOwnerTrust(_ *api.WatchOwnerTrustRequest, srv grpc.ServerStreamingServer[api.WatchOwnerTrustResponse]) error {
	ctx := srv.Context()
	release, err := a.openWatch(ctx)
	if err != nil {
		return err
	}
	defer release()
	w := a.ownerTrust.Watch()
	defer w.Close()
	for {
		t, err := w.Get(ctx, event.NotNil[*api.OwnerTrust]())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return status.Errorf(codes.Unavailable, "when following the owner trust: %v", err)
		}
		if err := srv.Send(&api.WatchOwnerTrustResponse{Trust: t}); err != nil {
			return fmt.Errorf("when sending the owner trust: %w", err)
		}
	}
}
