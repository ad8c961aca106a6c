package rpc

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/cancelon"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/proto/api"
)

// An owner certificate passes the TLS handshake while it is a valid
// certificate of the cluster CA: identity checks that once per connection.
// Whether the cluster still trusts the key it was issued for, and the
// certificate itself, changes while connections stay open. So a Server
// given the cluster's owner trust (JudgeOwners) judges the owner again at
// every call of an AUTHORIZATION_OWNER method, and ends the owner's
// streams as soon as a new trust refuses it:
//
//	owner ──TLS──▶ handshake: CA, profile, validity (identity)
//	                 ▼
//	               authorize: class OWNER ─▶ current api.OwnerTrust
//	                 │ none known yet         ─▶ wait for one, at most
//	                 │                           ownerTrustWait, then Unavailable
//	                 │ key is not the trust's ─▶ PermissionDenied, KEY_ROTATED
//	                 │ serial revoked         ─▶ PermissionDenied, REVOKED
//	                 ▼
//	               handler; a stream to the owner runs under a context
//	               that ends, with the refusal, at the first later trust
//	               that refuses it
//
// Refusals carry an api.OwnerCertificateRefusal detail, for cairnctl to
// say how to recover. A call forwarded by a curator names the owner's
// certificate (ForwardedCertificateHeader), so the leader judges the same
// certificate as the curator the owner dialled.

// JudgeOwners makes s admit the owner to AUTHORIZATION_OWNER methods only
// while trust, the cluster's current owner trust, admits the owner's key
// and certificate. While trust holds no value (or nil), owner calls wait
// for one (ownerTrustWait) and are then refused with Unavailable: a node
// that does not know whom the cluster trusts trusts nobody. Without JudgeOwners every owner certificate of the
// cluster CA is admitted. Like RegisterService, it must be called before
// Serve.
func (s *Server) JudgeOwners(trust event.Watchable[*api.OwnerTrust]) {
	s.owners = trust
}

// judgesOwner says whether s judges p, the caller of method m, against the
// owner trust.
func (s *Server) judgesOwner(m Method, p identity.Peer) bool {
	return s.owners != nil && p.Kind == identity.PeerOwner && m.Authz == api.Authorization_AUTHORIZATION_OWNER
}

// ownerTrustWait, a Server's ownerWait, bounds how long a call of the owner waits for a node that
// does not know the owner trust yet, as right after it booted, until it
// has heard from a curator: the node usually learns the trust within a few
// seconds of its start, so the call is answered instead of refused. A node
// that cannot reach any curator for longer still refuses, with Unavailable,
// rather than hold the owner's calls without end.
const ownerTrustWait = 20 * time.Second

// judgeOwner judges the owner p, calling method m, against the current
// owner trust, waiting for one (at most ownerTrustWait, and never past
// ctx) while the node knows none yet.
func (s *Server) judgeOwner(ctx context.Context, m Method, p identity.Peer) error {
	w := s.owners.Watch()
	defer w.Close()
	t, err := w.Get(ctx, event.BacklogOnly[*api.OwnerTrust]())
	if errors.Is(err, event.ErrBacklogDone) {
		t, err = nil, nil
	}
	if err == nil && !knowsOwner(t) {
		wctx, cancel := context.WithTimeout(ctx, s.ownerWait)
		t, err = w.Get(wctx, event.Filter(knowsOwner))
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return status.Errorf(codes.Unavailable, "%s: this node has not learnt which owner key the cluster trusts: it waited %v for a curator to tell it; retry once the node reaches a curator", m.Name, s.ownerWait)
		}
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "%s: cannot read the cluster's owner trust: %v", m.Name, err)
	}
	return checkOwner(m.Name, t, p)
}

// knowsOwner says whether t names an owner key: a node with such a trust
// can judge an owner.
func knowsOwner(t *api.OwnerTrust) bool {
	return t != nil && len(t.GetOwnerPublicKey()) == ed25519.PublicKeySize
}

// followOwner returns the context a stream of method m, whose caller
// authorize put in ctx, runs under: for a stream that sends to an owner
// (Logs), one that ends, with the refusal as its cause, as soon as the
// owner trust stops admitting the owner. Streams that end with a single
// answer (RotateOwnerKey) are judged once, like unary calls: following
// them would cut off the answer of the very call that changed the trust.
// end releases what following the trust holds, once the handler returned
// err, and returns the error the stream ends with: the refusal, if one
// ended it, else err.
func (s *Server) followOwner(ctx context.Context, m Method) (context.Context, func(err error) error) {
	p, _ := PeerFromContext(ctx)
	if !s.judgesOwner(m, p) || !m.ServerStream {
		return ctx, func(err error) error { return err }
	}
	jctx, stop := cancelon.Value(ctx, s.owners, func(t *api.OwnerTrust) error { return checkOwner(m.Name, t, p) })
	return jctx, func(err error) error {
		stop()
		cause := context.Cause(jctx)
		if ctx.Err() != nil || errors.Is(cause, context.Canceled) {
			// The call ended, or the handler returned first.
			return err
		}
		if _, ok := status.FromError(cause); ok {
			return cause
		}
		// The trust could not be read: end the stream rather than let it
		// run unjudged.
		return status.Errorf(codes.Unavailable, "%s: %v", m.Name, cause)
	}
}

// checkOwner judges p, a caller that presented an owner certificate of the
// cluster CA to method, against the owner trust t: nil when t admits it;
// Unavailable when t is nil, as on a node that has not learnt the trust
// yet; otherwise PermissionDenied with an api.OwnerCertificateRefusal
// detail. A caller whose certificate is unknown (Serial nil) is judged by
// its key alone.
func checkOwner(method string, t *api.OwnerTrust, p identity.Peer) error {
	if !knowsOwner(t) {
		return status.Errorf(codes.Unavailable, "%s: this node does not know yet which owner key the cluster trusts (it has not heard from a curator); retry shortly", method)
	}
	if !bytes.Equal(p.PublicKey, t.GetOwnerPublicKey()) {
		return ownerRefusal(api.OwnerCertificateRefusal_REASON_KEY_ROTATED, p.Serial,
			"%s: the owner certificate%s is for owner key %s, but the cluster's owner key is %s now: the key was rotated",
			method, serialSuffix(p.Serial), OwnerKeyFingerprint(p.PublicKey), OwnerKeyFingerprint(t.GetOwnerPublicKey()))
	}
	if p.Serial != nil {
		for _, r := range t.GetRevoked() {
			if bytes.Equal(r.GetSerial(), p.Serial.Bytes()) {
				return ownerRefusal(api.OwnerCertificateRefusal_REASON_REVOKED, p.Serial,
					"%s: the owner certificate%s was revoked", method, serialSuffix(p.Serial))
			}
		}
	}
	return nil
}

// ownerRefusal is a PermissionDenied status with a refusal detail.
func ownerRefusal(reason api.OwnerCertificateRefusal_Reason, serial *big.Int, format string, args ...any) error {
	st := status.Newf(codes.PermissionDenied, format, args...)
	detail := &api.OwnerCertificateRefusal{Reason: reason}
	if serial != nil {
		detail.Serial = serial.Bytes()
	}
	if withDetail, err := st.WithDetails(detail); err == nil {
		st = withDetail
	}
	return st.Err()
}

// OwnerRefusalOf returns the refusal detail of err, a status error with
// which a node refused an owner certificate, or nil when err is no such
// refusal.
func OwnerRefusalOf(err error) *api.OwnerCertificateRefusal {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.PermissionDenied {
		return nil
	}
	for _, d := range st.Details() {
		if r, ok := d.(*api.OwnerCertificateRefusal); ok {
			return r
		}
	}
	return nil
}

// FormatSerial spells a certificate serial number (its big-endian bytes,
// as api.RevokedOwnerCertificate holds it) the way Cairn shows and reads
// it: lowercase hex, two digits a byte.
func FormatSerial(serial []byte) string {
	return hex.EncodeToString(serial)
}

// serialSuffix is " <serial>" for messages, or "" when the serial is
// unknown.
func serialSuffix(serial *big.Int) string {
	if serial == nil {
		return ""
	}
	return " " + FormatSerial(serial.Bytes())
}

// OwnerKeyFingerprint names an owner key without spelling it out:
// "SHA256:" and the first 16 hex digits of the SHA-256 of its 32 bytes.
func OwnerKeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return fmt.Sprintf("SHA256:%x", sum[:8])
}
