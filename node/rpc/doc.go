// Package rpc is how Cairn's gRPC services authenticate and authorize
// their callers: TLS credentials built from node/identity, and server
// interceptors that admit each call only when the caller fits the class of
// caller its method declares.
//
// # Authorization is declared in the proto
//
// Every method of every service states, next to itself, who may call it:
//
//	rpc GetNodes(GetNodesRequest) returns (GetNodesResponse) {
//	  option (authz) = AUTHORIZATION_OWNER;
//	}
//
// There is no second list to keep in step. When a service is registered,
// Server looks each of its methods up in the protobuf registry and keeps
// the class in a table; every call is judged against that table. A method
// that declares no class, or that the registry does not know, is refused
// to everyone: forgetting the option closes a method, it never opens it.
// ListMethods enumerates every RPC of cairn.api with its class, so that
// tests can try each one with every kind of caller.
//
// # Classes
//
//	class                            admits                   handler then checks
//	OWNER                            owner certificate that   nothing more
//	                                 the owner trust admits
//	NODE                             node certificate         which node, its state
//	UNAUTHENTICATED_WITH_TICKET      anyone                   the register ticket
//	UNAUTHENTICATED_PROOF            anyone                   a proof of a known key
//
// A caller without a certificate of the cluster CA (none, or a self-signed
// one) calling an OWNER or NODE method gets Unauthenticated; a node calling
// an OWNER method, or the owner a NODE method, gets PermissionDenied. Both
// messages name the method, what it requires and what the caller showed.
// A certificate of another CA, an expired one, or one that fits no
// profile never gets that far: the TLS handshake refuses it, and the
// client sees the connection fail (Unavailable).
//
// # A call's way in
//
//	client ──TLS 1.3 handshake──▶ identity.Node.ServerTLSConfig
//	                                │ refuses foreign, expired and
//	                                │ malformed certificates
//	                                ▼
//	      interceptor ─▶ Node.PeerIdentity(TLS state) ─▶ identity.Peer
//	                                │                   (anonymous,
//	                                │                    self-signed,
//	                                ▼                    node, owner)
//	      method table[FullMethod] ─▶ class (from the authz option)
//	                                │ missing or UNSPECIFIED: PermissionDenied
//	                                │ class does not admit peer:
//	                                │   Unauthenticated / PermissionDenied
//	                                ▼
//	      handler(ctx) ─▶ PeerFromContext(ctx) ─▶ the caller's Peer
//
// # The owner trust
//
// A Server given the cluster's owner trust (JudgeOwners; the curators and
// node management are) admits an owner certificate only while it is for
// the trust's owner key and its serial is not revoked, judged at every
// call, and ends an owner's streams when a new trust refuses it. owner.go
// says how; a server without it admits every owner certificate of the CA.
//
// Handlers of the UNAUTHENTICATED classes must authenticate the caller
// themselves: RegisterNode checks the ticket in its request and takes the
// node key from the self-signed certificate; CommitNode and JoinNode find
// the node by the key of the self-signed certificate; AAA.Escrow checks a
// signature over EscrowProofPayload, which binds the proof to a nonce and
// to the TLS session.
//
// # Forwarded calls
//
// A curator that does not lead forwards calls to the one that does, over
// a connection made with its own node certificate. The leader must judge
// the original caller, not the forwarding node, so the forwarder names the
// caller in the ForwardedPeerHeader metadata (WithForwardedPeer): its kind
// and key, and the serial and expiry of its certificate
// (ForwardedCertificateHeader). A Server honours the header only when TrustForwarders gave it a
// ForwarderTrust and that trust accepts the connection's node; the
// method's class is then applied to the named caller, and PeerFromContext
// returns it. The trust sees the caller too, and may refuse it
// (CallerRefused): the curators judge a forwarded call's caller there, in
// the same etcd read as its forwarder. A trust that cannot judge (its
// read failed) ends the call Unavailable, not refused. From anyone else (the owner, a
// self-signed or untrusted node) and on a server without a trust, the
// header is refused with PermissionDenied: a node cannot pose as another
// caller.
//
//	owner ──mTLS──▶ follower ──mTLS (node cert)──▶ leader
//	                 │ header: "owner <key>"        │ trust(follower, owner)?
//	                 │                              │ class against owner
//	                 ▼                              ▼
//	                                          handler sees the owner
//
// # Limits
//
// NewServer bounds what any caller can take of a node, authenticated or
// not: the handshake's time, calls in flight per connection, message
// sizes, keepalive pings, idle and silent connections. limits.go names
// each value and why. A handler whose caller could hold a call open for
// free bounds it with Expire, which ends the call with DeadlineExceeded
// even while the handler waits in Recv. Limits per source use
// CallerAddress, which for a forwarded call is the address the trusted
// forwarder names (ForwardedAddressHeader), not the forwarder's own.
//
// # Credentials
//
// ServerCredentials serve with a node's identity. Clients dial with
// NodeCredentials (a node), OwnerCredentials (the owner, after Escrow) or
// EphemeralCredentials (anyone without a cluster certificate yet). All of
// them trust only servers holding a node certificate of the cluster CA.
package rpc
