package rpc

import (
	"context"
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/proto/api"
)

// peerKey is the context key under which authorize stores the caller.
type peerKey struct{}

// PeerFromContext returns the authenticated caller of the call whose
// context ctx is. It is false only outside a call of a Server.
func PeerFromContext(ctx context.Context) (identity.Peer, bool) {
	p, ok := ctx.Value(peerKey{}).(identity.Peer)
	return p, ok
}

// TLSConnectionState returns the state of the TLS connection a call came
// in on, on the server side, or went out on, on a client stream's
// Context(). It is false when the call does not run over TLS.
func TLSConnectionState(ctx context.Context) (tls.ConnectionState, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tls.ConnectionState{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tls.ConnectionState{}, false
	}
	return info.State, true
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	return resp, expired(ctx, info.FullMethod, err)
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	ctx, end := s.followOwner(ctx, s.table[info.FullMethod])
	err = end(handler(srv, &authorizedStream{ServerStream: ss, ctx: ctx}))
	return expired(ctx, info.FullMethod, err)
}

// authorizedStream carries the context with the authenticated caller to a
// stream handler.
type authorizedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authorizedStream) Context() context.Context { return a.ctx }

// authorize decides whether the caller of ctx may call method, and returns
// a context carrying the caller when it may.
func (s *Server) authorize(ctx context.Context, method string) (context.Context, error) {
	m, ok := s.table[method]
	if !ok || m.Authz == api.Authorization_AUTHORIZATION_UNSPECIFIED {
		return nil, status.Errorf(codes.PermissionDenied, "%s declares no authorization and is refused to everyone", method)
	}
	cs, ok := TLSConnectionState(ctx)
	if !ok {
		return nil, status.Errorf(codes.Unauthenticated, "%s: the call did not come over TLS", method)
	}
	p, err := s.node.PeerIdentity(cs)
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	if vals := metadata.ValueFromIncomingContext(ctx, ForwardedPeerHeader); len(vals) > 0 {
		if p, err = s.forwardedPeer(ctx, method, p, vals); err != nil {
			return nil, err
		}
		if ctx, err = forwardedAddress(ctx, method); err != nil {
			return nil, err
		}
		if p, err = forwardedCertificate(ctx, method, p); err != nil {
			return nil, err
		}
	}
	if err := admit(m, p); err != nil {
		return nil, err
	}
	if s.judgesOwner(m, p) {
		if err := s.judgeOwner(ctx, m, p); err != nil {
			return nil, err
		}
	}
	return context.WithValue(ctx, peerKey{}, p), nil
}

// admit applies m's class to the caller p: nil when p may call m, else a
// status error naming the method, what it requires and what p is.
func admit(m Method, p identity.Peer) error {
	var want identity.PeerKind
	switch m.Authz {
	case api.Authorization_AUTHORIZATION_UNAUTHENTICATED_WITH_TICKET,
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_PROOF:
		// The handler authenticates the caller by the ticket or proof.
		return nil
	case api.Authorization_AUTHORIZATION_OWNER:
		want = identity.PeerOwner
	case api.Authorization_AUTHORIZATION_NODE:
		want = identity.PeerNode
	default:
		return status.Errorf(codes.PermissionDenied, "%s declares authorization %s, which this node does not know; refused", m.Name, m.Authz)
	}
	switch p.Kind {
	case want:
		return nil
	case identity.PeerAnonymous, identity.PeerSelfSigned:
		return status.Errorf(codes.Unauthenticated, "%s requires %s of the cluster CA; the caller presented %s", m.Name, required(want), presented(p))
	default:
		return status.Errorf(codes.PermissionDenied, "%s requires %s; the caller presented %s", m.Name, required(want), presented(p))
	}
}

// required says in words what certificate a class requires.
func required(k identity.PeerKind) string {
	if k == identity.PeerOwner {
		return "the owner certificate"
	}
	return "a " + k.String() + " certificate"
}

// presented says in words what certificate p showed.
func presented(p identity.Peer) string {
	switch p.Kind {
	case identity.PeerAnonymous:
		return "no certificate"
	case identity.PeerSelfSigned:
		return "a self-signed certificate"
	case identity.PeerNode:
		return "the node certificate of " + p.NodeID
	case identity.PeerOwner:
		return "the owner certificate"
	}
	return "a certificate of kind " + p.Kind.String()
}
