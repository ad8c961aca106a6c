package rpc

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
)

// ForwardedPeerHeader is the gRPC metadata key with which a node that
// forwards a call names the caller it forwards for. A Server honours it
// only from a node its ForwarderTrust accepts (see TrustForwarders).
const ForwardedPeerHeader = "cairn-forwarded-peer"

// ForwardedAddressHeader is the gRPC metadata key with which a node that
// forwards a call names the IP address the caller connected from, so that
// limits per source (RegisterNode's) count the caller, not the forwarder.
// A Server reads it only together with a ForwardedPeerHeader it honours.
const ForwardedAddressHeader = "cairn-forwarded-address"

// ForwardedCertificateHeader is the gRPC metadata key with which a node
// that forwards a call names the certificate the caller presented: its
// serial number in lowercase hex (FormatSerial) and its expiry in Unix
// seconds, "<serial> <not after>". The server it forwards to then sees the
// same identity.Peer, so that it judges revocations (JudgeOwners) and its
// handlers see the caller's certificate. A Server reads it only together
// with a ForwardedPeerHeader it honours; a call without it is judged by
// the caller's key alone.
const ForwardedCertificateHeader = "cairn-forwarded-certificate"

// ForwarderTrust decides whether the node forwarder may forward a call on
// behalf of caller: nil when it may. The server calls it on every call
// that carries ForwardedPeerHeader, after the TLS handshake proved that
// forwarder holds a node certificate and the header named caller. It may
// judge caller too, in the same look at its records (the curators read
// both in one etcd read): a refusal of the caller is returned as
// CallerRefused, which ends the call with its Err as it is. A status
// error of code Unavailable, Canceled or DeadlineExceeded says that the
// trust could not be judged (its records could not be read, say while
// etcd elects a leader): it ends the call as it is, for the caller to
// try again. Any other error refuses the forwarder.
type ForwarderTrust func(ctx context.Context, forwarder, caller identity.Peer) error

// CallerRefused is a ForwarderTrust's refusal of the caller a call is
// forwarded for, not of the forwarder: the server ends the call with Err,
// a status error, as if the caller had called it directly.
type CallerRefused struct{ Err error }

func (e CallerRefused) Error() string { return e.Err.Error() }
func (e CallerRefused) Unwrap() error { return e.Err }

// TrustForwarders makes s accept calls that a node forwards for another
// caller, when trust accepts that node: the handler then sees the original
// caller in PeerFromContext, and the method's class is judged against it.
// Without it, or when trust refuses, a call carrying ForwardedPeerHeader is
// refused (PermissionDenied). Like RegisterService, it must be called
// before Serve.
func (s *Server) TrustForwarders(trust ForwarderTrust) {
	s.trust = trust
}

// peer kinds as the header spells them; fixed, as nodes of different
// versions must understand each other.
var forwardedKinds = map[identity.PeerKind]string{
	identity.PeerAnonymous:  "anonymous",
	identity.PeerSelfSigned: "self-signed",
	identity.PeerNode:       "node",
	identity.PeerOwner:      "owner",
}

// WithForwardedPeer returns a copy of the outgoing context ctx that tells
// the server the call is made on behalf of p and, when ctx is the context
// of the call being forwarded, from the caller's address (CallerAddress).
// The server accepts it only from a node it trusts to forward.
func WithForwardedPeer(ctx context.Context, p identity.Peer) context.Context {
	kv := []string{ForwardedPeerHeader, encodeForwardedPeer(p)}
	if p.Serial != nil && p.Serial.Sign() > 0 {
		kv = append(kv, ForwardedCertificateHeader, encodeForwardedCertificate(p))
	}
	if addr, ok := CallerAddress(ctx); ok {
		kv = append(kv, ForwardedAddressHeader, addr.String())
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// addressKey is the context key under which authorize stores the address
// a trusted forwarder named.
type addressKey struct{}

// CallerAddress returns the IP address the caller of ctx's call connected
// from: for a call a trusted node forwarded, the address that node named;
// otherwise the remote address of the call's connection. It is false
// outside a call, or when the connection has no IP address.
func CallerAddress(ctx context.Context) (netip.Addr, bool) {
	if addr, ok := ctx.Value(addressKey{}).(netip.Addr); ok {
		return addr, true
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

// forwardedAddress returns ctx carrying the caller's address that the
// trusted forwarder of the call of method named, if it named one; a
// forwarder that names none leaves its own connection's address.
func forwardedAddress(ctx context.Context, method string) (context.Context, error) {
	vals := metadata.ValueFromIncomingContext(ctx, ForwardedAddressHeader)
	if len(vals) == 0 {
		return ctx, nil
	}
	if len(vals) != 1 {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %d forwarded addresses, want one", method, len(vals))
	}
	addr, err := netip.ParseAddr(vals[0])
	if err != nil || addr.Zone() != "" {
		return nil, status.Errorf(codes.InvalidArgument, "%s: forwarded address %q is not an IP address", method, vals[0])
	}
	return context.WithValue(ctx, addressKey{}, addr.Unmap()), nil
}

// forwardedCertificate returns p, the caller a trusted forwarder named for
// a call of method, with the serial number and expiry of the certificate
// the forwarder names, if it names one.
func forwardedCertificate(ctx context.Context, method string, p identity.Peer) (identity.Peer, error) {
	vals := metadata.ValueFromIncomingContext(ctx, ForwardedCertificateHeader)
	if len(vals) == 0 {
		return p, nil
	}
	if len(vals) != 1 {
		return identity.Peer{}, status.Errorf(codes.InvalidArgument, "%s: %d forwarded certificates, want one", method, len(vals))
	}
	if p.Kind != identity.PeerNode && p.Kind != identity.PeerOwner {
		return identity.Peer{}, status.Errorf(codes.InvalidArgument, "%s: a forwarded certificate for a %s caller, which has none of the cluster", method, p.Kind)
	}
	serial, notAfter, err := decodeForwardedCertificate(vals[0])
	if err != nil {
		return identity.Peer{}, status.Errorf(codes.InvalidArgument, "%s: bad forwarded certificate: %v", method, err)
	}
	p.Serial, p.NotAfter = serial, notAfter
	return p, nil
}

// encodeForwardedCertificate spells the serial and expiry of p's
// certificate as "<hex serial> <Unix seconds>".
func encodeForwardedCertificate(p identity.Peer) string {
	return FormatSerial(p.Serial.Bytes()) + " " + strconv.FormatInt(p.NotAfter.Unix(), 10)
}

// decodeForwardedCertificate reads what encodeForwardedCertificate wrote,
// in its one spelling.
func decodeForwardedCertificate(v string) (*big.Int, time.Time, error) {
	serialHex, notAfter, ok := strings.Cut(v, " ")
	if !ok {
		return nil, time.Time{}, fmt.Errorf("%q is not \"<serial> <not after>\"", v)
	}
	raw, err := hex.DecodeString(serialHex)
	if err != nil || len(raw) == 0 || raw[0] == 0 || FormatSerial(raw) != serialHex {
		return nil, time.Time{}, fmt.Errorf("serial %q is not lowercase hex without leading zero bytes", serialHex)
	}
	if len(raw) > maxSerialSize {
		return nil, time.Time{}, fmt.Errorf("serial is %d bytes, more than %d", len(raw), maxSerialSize)
	}
	sec, err := strconv.ParseInt(notAfter, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != notAfter {
		return nil, time.Time{}, fmt.Errorf("expiry %q is not Unix seconds", notAfter)
	}
	return new(big.Int).SetBytes(raw), time.Unix(sec, 0).UTC(), nil
}

// maxSerialSize is the longest certificate serial number RFC 5280 allows,
// in bytes.
const maxSerialSize = 20

// encodeForwardedPeer spells p as "<kind>" or "<kind> <base64 key>".
func encodeForwardedPeer(p identity.Peer) string {
	kind := forwardedKinds[p.Kind]
	if len(p.PublicKey) == 0 {
		return kind
	}
	return kind + " " + base64.RawStdEncoding.EncodeToString(p.PublicKey)
}

// decodeForwardedPeer reads what encodeForwardedPeer wrote, and checks
// that the peer it names can exist: a key for every kind but anonymous.
func decodeForwardedPeer(v string) (identity.Peer, error) {
	kindName, key, hasKey := strings.Cut(v, " ")
	var p identity.Peer
	found := false
	for k, name := range forwardedKinds {
		if name == kindName {
			p.Kind, found = k, true
		}
	}
	if !found {
		return identity.Peer{}, fmt.Errorf("unknown peer kind %q", kindName)
	}
	if p.Kind == identity.PeerAnonymous {
		if hasKey {
			return identity.Peer{}, fmt.Errorf("an anonymous peer has no key")
		}
		return p, nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(key)
	if err != nil {
		return identity.Peer{}, fmt.Errorf("when decoding the peer's key: %w", err)
	}
	if base64.RawStdEncoding.EncodeToString(raw) != key {
		// Stray newlines or trailing bits: one key, one spelling.
		return identity.Peer{}, fmt.Errorf("the peer's key is not canonical base64")
	}
	if len(raw) != ed25519.PublicKeySize {
		return identity.Peer{}, fmt.Errorf("the peer's key is %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	p.PublicKey = ed25519.PublicKey(raw)
	if p.Kind == identity.PeerNode {
		p.NodeID = identity.NodeID(p.PublicKey)
	}
	return p, nil
}

// forwardedPeer returns the caller a forwarded call of method is made for,
// when the connection's peer conn may forward it. vals are the values of
// ForwardedPeerHeader.
func (s *Server) forwardedPeer(ctx context.Context, method string, conn identity.Peer, vals []string) (identity.Peer, error) {
	if s.trust == nil {
		return identity.Peer{}, status.Errorf(codes.PermissionDenied, "%s: the call is forwarded for another caller, and this server accepts no forwarded calls", method)
	}
	if conn.Kind != identity.PeerNode {
		return identity.Peer{}, status.Errorf(codes.PermissionDenied, "%s: only nodes may forward calls; the caller presented %s", method, presented(conn))
	}
	if len(vals) != 1 {
		return identity.Peer{}, status.Errorf(codes.InvalidArgument, "%s: %d forwarded peers, want one", method, len(vals))
	}
	p, err := decodeForwardedPeer(vals[0])
	if err != nil {
		return identity.Peer{}, status.Errorf(codes.InvalidArgument, "%s: bad forwarded peer: %v", method, err)
	}
	if err := s.trust(ctx, conn, p); err != nil {
		if refused, ok := errors.AsType[CallerRefused](err); ok {
			return identity.Peer{}, refused.Err
		}
		if unjudged(err) {
			return identity.Peer{}, err
		}
		return identity.Peer{}, status.Errorf(codes.PermissionDenied, "%s: node %s may not forward calls: %v", method, conn.NodeID, err)
	}
	return p, nil
}

// unjudged says whether err, a ForwarderTrust's, is not a judgement but
// the failure to reach one, which the caller may retry.
func unjudged(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}
