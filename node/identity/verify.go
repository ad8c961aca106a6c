package identity

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"
)

// parseCA parses the cluster CA certificate and checks that it is an
// ed25519 CA.
func parseCA(der []byte) (*x509.Certificate, error) {
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("when parsing CA certificate: %w", err)
	}
	if !ca.BasicConstraintsValid || !ca.IsCA {
		return nil, fmt.Errorf("CA certificate %q is not marked as a CA", ca.Subject.CommonName)
	}
	if _, ok := ca.PublicKey.(ed25519.PublicKey); !ok {
		return nil, fmt.Errorf("CA key is %T, want ed25519", ca.PublicKey)
	}
	return ca, nil
}

// parseLeaf parses a certificate issued to key by ca and returns what it
// identifies. It checks the key, the CA's signature and the profile, but not
// the validity period (see NewNode).
func parseLeaf(key ed25519.PrivateKey, certDER []byte, ca *x509.Certificate) (*x509.Certificate, Peer, error) {
	if err := checkPrivateKey(key); err != nil {
		return nil, Peer{}, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, Peer{}, fmt.Errorf("when parsing certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, Peer{}, fmt.Errorf("certificate %q is not for this private key", cert.Subject.CommonName)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return nil, Peer{}, fmt.Errorf("certificate %q is not issued by the cluster CA: %w", cert.Subject.CommonName, err)
	}
	peer, err := classify(cert)
	if err != nil {
		return nil, Peer{}, err
	}
	return cert, peer, nil
}

// checkPrivateKey refuses anything but a well-formed ed25519 private key,
// whose public half matches its seed.
func checkPrivateKey(key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if !bytes.Equal(ed25519.NewKeyFromSeed(key.Seed()), key) {
		return errors.New("private key's public half does not match its seed")
	}
	return nil
}

// verifier judges peers' certificates against one cluster CA.
type verifier struct {
	ca    *x509.Certificate
	roots *x509.CertPool
	// now is the time at which certificates must be valid; tests move it.
	now func() time.Time
	// judged remembers the leaves that chained to the CA (see verified)
	// and the self-signed ones (see selfSigned).
	judged sync.Map // judgedKey → judgement
}

func newVerifier(ca *x509.Certificate) *verifier {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &verifier{ca: ca, roots: roots, now: time.Now}
}

// A judgedKey names one parsed leaf certificate, weakly, and the usage it
// was verified for.
type judgedKey struct {
	leaf  weak.Pointer[x509.Certificate]
	usage x509.ExtKeyUsage
}

// A judgement is what a leaf proved, and the time in which it holds: the
// overlap of the leaf's and the CA's validity periods.
type judgement struct {
	peer        Peer
	from, until time.Time
}

// verified returns what leaf proved when it was last verified for usage,
// if that still holds at now.
//
// Every call on a connection judges the certificate the peer presented in
// its handshake: a node beating every few seconds over one connection
// would otherwise cost the server an ed25519 verification per call, and a
// forwarding curator one per call it forwards. The connection keeps the same
// parsed certificate for its life, so that certificate, by address, keys
// the judgement. Of the verifications against the CA, only chains to it
// are remembered (self-signed leaves are selfSigned's): x509's verification
// of a leaf against the one root depends on nothing but the two
// certificates, the usage and the time, and the time only through the two
// validity periods, which the judgement keeps. The entry goes when the
// certificate is collected, with its connection.
func (v *verifier) verified(leaf *x509.Certificate, usage x509.ExtKeyUsage, now time.Time) (Peer, bool) {
	j, ok := v.judged.Load(judgedKey{weak.Make(leaf), usage})
	if !ok {
		return Peer{}, false
	}
	jj := j.(judgement)
	if now.Before(jj.from) || now.After(jj.until) {
		return Peer{}, false
	}
	return jj.peer, true
}

// remember keeps what leaf proved for usage, for verified.
func (v *verifier) remember(leaf *x509.Certificate, usage x509.ExtKeyUsage, p Peer) {
	from, until := leaf.NotBefore, leaf.NotAfter
	if v.ca.NotBefore.After(from) {
		from = v.ca.NotBefore
	}
	if v.ca.NotAfter.Before(until) {
		until = v.ca.NotAfter
	}
	v.keep(leaf, usage, judgement{peer: p, from: from, until: until})
}

// keep stores j for leaf under usage, until leaf is collected.
func (v *verifier) keep(leaf *x509.Certificate, usage x509.ExtKeyUsage, j judgement) {
	key := judgedKey{weak.Make(leaf), usage}
	if _, loaded := v.judged.Swap(key, j); !loaded {
		runtime.AddCleanup(leaf, func(k judgedKey) { v.judged.Delete(k) }, key)
	}
}

// selfSignedUsage keys, in judged, the judgement that a leaf is signed by
// its own key: no usage a certificate is verified for has this value, so
// verified never returns it.
const selfSignedUsage x509.ExtKeyUsage = -1

// selfSigned judges leaf as a self-signed certificate, and remembers what
// it proved: a registering node calls RegisterNode and CommitNode on the
// connection whose handshake checked the same signature. The judgement
// depends on nothing but the certificate (selfSignedKey checks no time),
// so it holds for the certificate's life.
func (v *verifier) selfSigned(leaf *x509.Certificate) (Peer, bool) {
	if j, ok := v.judged.Load(judgedKey{weak.Make(leaf), selfSignedUsage}); ok {
		return j.(judgement).peer, true
	}
	pub, ok := selfSignedKey(leaf)
	if !ok {
		return Peer{}, false
	}
	p := Peer{Kind: PeerSelfSigned, PublicKey: pub}
	v.keep(leaf, selfSignedUsage, judgement{peer: p})
	return p, true
}

// verify judges the certificates a peer presented, leaf first. No
// certificate makes a PeerAnonymous. A leaf signed by the CA, valid now,
// allowed for usage and following a profile makes a PeerNode or PeerOwner.
// When selfSigned is set, a lone self-signed leaf makes a PeerSelfSigned.
// Anything else is an error.
func (v *verifier) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage, selfSigned bool) (Peer, error) {
	if len(certs) == 0 {
		return Peer{Kind: PeerAnonymous}, nil
	}
	leaf := certs[0]
	now := v.now()
	if p, ok := v.verified(leaf, usage, now); ok {
		return p, nil
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:       v.roots,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	if err == nil {
		p, err := classify(leaf)
		if err == nil {
			v.remember(leaf, usage, p)
		}
		return p, err
	}
	if selfSigned && len(certs) == 1 {
		if p, ok := v.selfSigned(leaf); ok {
			return p, nil
		}
	}
	return Peer{}, fmt.Errorf("peer certificate %q is not valid under the cluster CA: %w", leaf.Subject.CommonName, err)
}

// selfSignedKey returns the key of a certificate that names itself as its
// issuer and is signed by its own ed25519 key.
func selfSignedKey(cert *x509.Certificate) (ed25519.PublicKey, bool) {
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || !bytes.Equal(cert.RawIssuer, cert.RawSubject) {
		return nil, false
	}
	if cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) != nil {
		return nil, false
	}
	return pub, true
}
