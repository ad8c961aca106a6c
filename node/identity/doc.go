// Package identity holds who a node is and how it proves it: the node's
// ed25519 key, the node ID derived from that key, the certificate the
// cluster CA issued for it, and the TLS configurations with which nodes and
// operators authenticate each other.
//
// Trust comes from the cluster CA alone. No configuration built here ever
// consults the system's root certificates, and every one requires TLS 1.3.
//
// # Certificate profile
//
// Every certificate that identifies someone to the cluster carries an
// ed25519 key and is signed directly by the cluster CA, without
// intermediates:
//
//	         Subject CN   Subject OU   DNS SANs    ExtKeyUsage
//	node     <node ID>    "node"       <node ID>   ServerAuth, ClientAuth
//	owner    "owner"      "owner"      (none)      ClientAuth
//	metrics  <scraper>    "metrics"    (none)      ClientAuth
//
// The OU is the marker of the kind, and it must be the only OU: the CA
// puts it there, so once the signature checks out the kind is the CA's
// word. A node certificate's CN must also be the ID derived from the
// certificate's own key, which binds the name to the key.
// NodeCertificateTemplate and OwnerCertificateTemplate build exactly these
// fields for whoever issues the certificates.
//
// # Who talks to whom
//
//	client configuration                presents         server sees (PeerKind)
//	Node.ClientTLSConfig                node cert        PeerNode, with its ID
//	OwnerClientTLSConfig                owner cert       PeerOwner
//	(a scraper, node/metrics)           metrics cert     PeerMetrics
//	EphemeralClientTLSConfig(ca, key)   self-signed      PeerSelfSigned
//	EphemeralClientTLSConfig(ca, nil)   nothing          PeerAnonymous
//
// The server (Node.ServerTLSConfig) accepts all five and refuses everything
// else: a certificate from another CA, an expired one, one whose key the
// client does not hold, one that fits neither profile. Which RPC may be
// called by which kind of peer is for the RPC layer to decide; it learns
// the peer from Node.PeerIdentity. A self-signed certificate proves only
// that the client holds its key, which is all a registering node (its node
// key) or an operator taking ownership (the owner key) can prove.
//
// Every client configuration, the ephemeral ones included, accepts only a
// server holding a node certificate of the cluster CA. The server's name is
// not compared with the dialled host: nodes are dialled by IP address and
// any node of the cluster may answer.
package identity
