// Package pki keeps a cluster's certificate authority and the certificates it
// issues in etcd, so that every node holding an etcd client sees one and the
// same CA.
//
// Everything lives under a Namespace, a key prefix. A Certificate names one
// certificate in that namespace; Ensure issues it the first time it is asked
// for and returns the stored one ever after:
//
//	Certificate{Name: "ca", Issuer: SelfSigned, Mode: ManagedKey}
//	        │ Ensure
//	        ▼
//	 stored? ──yes──▶ return the stored DER (and load the stored key)
//	        │no
//	        ▼
//	 generate key (ManagedKey) or take PublicKey (ExternalKey),
//	 sign with the Issuer (Ensure-ing the issuer first)
//	        │
//	        ▼
//	 etcd txn: if <prefix>certs/<name>/cert does not exist
//	           then put cert (+ key)  else get cert (+ key)
//	        │
//	        ▼
//	 we won: return ours      we lost: return the winner's
//
// Two nodes that race to create the same CA both generate a key and sign a
// certificate, but only one transaction can create the key, and the loser
// adopts the winner's certificate and key: there is exactly one CA.
//
// # Layout in etcd
//
//	<prefix>certs/<name>/cert              DER certificate
//	<prefix>certs/<name>/key               PKCS#8 DER private key (ManagedKey)
//	<prefix>revoked/<issuer>/<serial hex>  revocation time, RFC 3339
//
// A ManagedKey's private key is stored in etcd in the clear: whoever can read
// this part of etcd can sign as the CA. That is the price of a CA that any
// consensus member can use; etcd's own peer and client access must therefore
// be guarded (peer mTLS, clients on a local unix socket only).
//
// # Keys and lifetimes
//
// All keys are ed25519. Serial numbers are 127-bit random numbers: issuers
// on different nodes never have to coordinate, and the 126 random bits make a
// collision out of the question. Certificates from the template helpers (CA,
// Server, Client) do not expire (RFC 5280's 99991231235959Z) unless the
// Certificate sets a Lifetime; EnsureFresh then issues a new one, with a new
// serial, in place of one that has used up half of it. A certificate is
// withdrawn before its end by revoking its serial, and the issuer's CRL
// lists it.
package pki
