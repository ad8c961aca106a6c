package rpc

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// TestForwardedPeer calls a server, over real TLS, through connections of
// a trusted forwarder, an untrusted node and the owner, each claiming to
// forward for some caller, and checks whom the handler sees.
func TestForwardedPeer(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	forwarder := ca.Node(t)
	untrusted := ca.Node(t)
	other := ca.Node(t)
	ownerKey, ownerDER := ca.Owner(t)
	ownerPub := ownerKey.Public().(ed25519.PublicKey)
	selfKey := identitytest.NewKey(t).Public().(ed25519.PublicKey)

	revoked := ca.Node(t)
	revokedErr := status.Errorf(codes.PermissionDenied, "node %s is DECOMMISSIONED", revoked.ID())
	unread := ca.Node(t)
	unreadErr := status.Errorf(codes.Unavailable, "when reading the records of node %s and of its caller: etcdserver: leader changed", forwarder.ID())
	trust := func(_ context.Context, p, caller identity.Peer) error {
		if p.NodeID != forwarder.ID() {
			return errors.New("not a consensus member")
		}
		if caller.NodeID == revoked.ID() {
			return CallerRefused{Err: revokedErr}
		}
		if caller.NodeID == unread.ID() {
			return unreadErr
		}
		return nil
	}
	trusting := startServer(t, ca.Node(t), func(s *Server) {
		registerTestServices(s)
		s.TrustForwarders(trust)
	})
	plain := startServer(t, ca.Node(t), registerTestServices)

	owner, err := OwnerCredentials(ownerKey, ownerDER, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	fromForwarder := dial(t, trusting, NodeCredentials(forwarder))
	fromUntrusted := dial(t, trusting, NodeCredentials(untrusted))
	fromOwner := dial(t, trusting, owner)
	toPlain := dial(t, plain, NodeCredentials(forwarder))

	ownerPeer := identity.Peer{Kind: identity.PeerOwner, PublicKey: ownerPub}
	otherPeer := identity.Peer{Kind: identity.PeerNode, NodeID: other.ID(), PublicKey: other.PublicKey()}
	selfPeer := identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: selfKey}
	for _, tc := range []struct {
		name   string
		method string
		header string // raw header value, when not from peer
		peer   *identity.Peer
		want   codes.Code
		sees   string
	}{
		{name: "owner via forwarder", method: "/cairn.api.Management/GetNodes", peer: &ownerPeer, want: codes.OK, sees: "owner "},
		{name: "node via forwarder", method: "/cairn.api.Curator/Heartbeat", peer: &otherPeer, want: codes.OK, sees: "node " + other.ID()},
		{name: "self-signed via forwarder", method: "/cairn.api.Curator/RegisterNode", peer: &selfPeer, want: codes.OK, sees: "self-signed "},
		{name: "anonymous via forwarder", method: "/cairn.api.Curator/JoinNode", peer: &identity.Peer{}, want: codes.OK, sees: "anonymous "},
		{name: "watch stream via forwarder", method: "/cairn.api.Curator/Watch", peer: &otherPeer, want: codes.OK, sees: "node " + other.ID()},
		// The class is judged against the original caller.
		{name: "node via forwarder calls owner method", method: "/cairn.api.Management/GetNodes", peer: &otherPeer, want: codes.PermissionDenied},
		{name: "self-signed via forwarder calls node method", method: "/cairn.api.Curator/Heartbeat", peer: &selfPeer, want: codes.Unauthenticated},
		{name: "garbled header", method: "/cairn.api.Curator/Heartbeat", header: "node !!!", want: codes.InvalidArgument},
		{name: "unknown kind", method: "/cairn.api.Curator/Heartbeat", header: "root", want: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.peer != nil {
				ctx = WithForwardedPeer(ctx, *tc.peer)
			} else {
				ctx = metadata.AppendToOutgoingContext(ctx, ForwardedPeerHeader, tc.header)
			}
			m, err := LookupMethod(tc.method)
			if err != nil {
				t.Fatal(err)
			}
			sees, err := call(ctx, fromForwarder, m)
			if got := status.Code(err); got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.method, err, tc.want)
			}
			if tc.want == codes.OK && sees != tc.sees {
				t.Errorf("%s: handler saw %q, want %q", tc.method, sees, tc.sees)
			}
		})
	}

	// The trust's refusal of the caller reaches the caller as it is, not
	// as a refusal of the forwarder.
	revokedPeer := identity.Peer{Kind: identity.PeerNode, NodeID: revoked.ID(), PublicKey: revoked.PublicKey()}
	if _, err := forwardCall(fromForwarder, revokedPeer); status.Code(err) != codes.PermissionDenied || status.Convert(err).Message() != status.Convert(revokedErr).Message() {
		t.Errorf("forwarding for a caller the trust refuses = %v, want %v", err, revokedErr)
	}

	// A trust that could not read its records refuses nobody: the
	// caller is told to try again, as the trust said.
	unreadPeer := identity.Peer{Kind: identity.PeerNode, NodeID: unread.ID(), PublicKey: unread.PublicKey()}
	if _, err := forwardCall(fromForwarder, unreadPeer); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != status.Convert(unreadErr).Message() {
		t.Errorf("forwarding when the trust cannot read its records = %v, want %v", err, unreadErr)
	}

	// Nobody else may claim to forward: the header is refused from an
	// untrusted node, from the owner, and by a server that trusts no one.
	for _, tc := range []struct {
		name string
		conn func() (string, error)
	}{
		{"untrusted node", func() (string, error) { return forwardCall(fromUntrusted, ownerPeer) }},
		{"owner", func() (string, error) { return forwardCall(fromOwner, ownerPeer) }},
		{"server without trust", func() (string, error) { return forwardCall(toPlain, ownerPeer) }},
	} {
		sees, err := tc.conn()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s forwarding for the owner = %q, %v, want PermissionDenied", tc.name, sees, err)
		}
	}
}

// forwardCall calls GetNodes over conn, claiming to forward for p, and
// returns the peer the handler saw.
func forwardCall(conn *grpc.ClientConn, p identity.Peer) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := LookupMethod("/cairn.api.Management/GetNodes")
	if err != nil {
		return "", err
	}
	return call(WithForwardedPeer(ctx, p), conn, m)
}
