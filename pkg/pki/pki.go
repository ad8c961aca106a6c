package pki

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Namespace is a prefix in etcd under which certificates live. Two
// Namespaces with different prefixes never see each other's certificates.
type Namespace struct {
	// Prefix is prepended to every key this package reads or writes. A
	// trailing "/" is added when it is missing.
	Prefix string
}

func (n *Namespace) prefix() string {
	if n.Prefix == "" || strings.HasSuffix(n.Prefix, "/") {
		return n.Prefix
	}
	return n.Prefix + "/"
}

// CertificateKey is the etcd key under which the certificate called name is
// stored, DER.
func (n *Namespace) CertificateKey(name string) string {
	return n.prefix() + "certs/" + name + "/cert"
}

func (n *Namespace) privateKeyKey(name string) string {
	return n.prefix() + "certs/" + name + "/key"
}

func (n *Namespace) revokedPrefix(issuer string) string {
	return n.prefix() + "revoked/" + issuer + "/"
}

// CertificateMode says where a certificate's private key comes from.
type CertificateMode int

const (
	// ManagedKey: Ensure generates the key pair and stores the private key
	// next to the certificate in etcd, where every member can read it. For
	// a CA that any consensus member must be able to sign with.
	ManagedKey CertificateMode = iota
	// ExternalKey: the private key stays with its owner (a node); only the
	// PublicKey is given, and nothing secret is stored in etcd.
	ExternalKey
)

func (m CertificateMode) String() string {
	switch m {
	case ManagedKey:
		return "managed key"
	case ExternalKey:
		return "external key"
	}
	return fmt.Sprintf("CertificateMode(%d)", int(m))
}

var (
	// ErrKeyMismatch is returned by Ensure for an ExternalKey certificate
	// when etcd already holds a certificate of that name for another key.
	ErrKeyMismatch = errors.New("stored certificate is for a different public key")
	// ErrNoPrivateKey is returned when a certificate must sign something
	// (as an issuer, or to sign itself) but its private key is not known.
	ErrNoPrivateKey = errors.New("private key not available")
)

// Issuer signs certificates: SelfSigned, or a CA *Certificate.
type Issuer interface {
	// issue signs tmpl for pub and returns the certificate's DER. self is
	// the subject's own private key, used only by SelfSigned.
	issue(ctx context.Context, kv clientv3.KV, tmpl *x509.Certificate, pub ed25519.PublicKey, self ed25519.PrivateKey) ([]byte, error)
}

type selfSigned struct{}

// SelfSigned is the Issuer of a root CA: the certificate signs itself, so its
// Mode must be ManagedKey.
var SelfSigned Issuer = selfSigned{}

func (selfSigned) issue(_ context.Context, _ clientv3.KV, tmpl *x509.Certificate, pub ed25519.PublicKey, self ed25519.PrivateKey) ([]byte, error) {
	if self == nil {
		return nil, fmt.Errorf("when self-signing: %w", ErrNoPrivateKey)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, self)
	if err != nil {
		return nil, fmt.Errorf("when self-signing: %w", err)
	}
	return der, nil
}

// Certificate is one certificate in a Namespace. Build it as a struct literal
// (usually with a template helper: CA, Server, Client) and call Ensure. A
// Certificate caches what Ensure returned; it is safe for concurrent use and
// must not be copied after first use.
type Certificate struct {
	// Namespace is where the certificate is kept in etcd.
	Namespace *Namespace
	// Issuer signs the certificate: nil or SelfSigned for a root CA, or
	// the CA's *Certificate.
	Issuer Issuer
	// Name is the certificate's key in the namespace. It must not be empty
	// nor contain "/".
	Name string
	// Template is what the certificate says. Its SerialNumber is always
	// replaced by a fresh random one; a zero NotBefore becomes now and a
	// zero NotAfter becomes "no expiry", or NotBefore plus Lifetime.
	Template x509.Certificate
	// Lifetime, when not zero, bounds the certificate: each one issued is
	// valid from a little before it was signed (clock skew) for Lifetime,
	// and EnsureFresh replaces it once half of that has passed.
	Lifetime time.Duration
	// Mode says whether the key is generated and stored in etcd or given.
	Mode CertificateMode
	// PublicKey is the subject's key. Required for ExternalKey; for
	// ManagedKey, Ensure fills it in.
	PublicKey ed25519.PublicKey

	mu      sync.Mutex
	certDER []byte
	private ed25519.PrivateKey
}

func (c *Certificate) validate() error {
	if c.Namespace == nil {
		return errors.New("no namespace")
	}
	if c.Name == "" || strings.Contains(c.Name, "/") {
		return fmt.Errorf("invalid name %q", c.Name)
	}
	if c.Issuer == Issuer(c) {
		return fmt.Errorf("certificate %q names itself as issuer, use SelfSigned", c.Name)
	}
	switch c.Mode {
	case ManagedKey:
	case ExternalKey:
		if len(c.PublicKey) != ed25519.PublicKeySize {
			return fmt.Errorf("external key certificate %q: public key has %d bytes, want %d", c.Name, len(c.PublicKey), ed25519.PublicKeySize)
		}
		if c.issuer() == SelfSigned {
			return fmt.Errorf("external key certificate %q cannot sign itself: %w", c.Name, ErrNoPrivateKey)
		}
	default:
		return fmt.Errorf("certificate %q: unknown mode %v", c.Name, c.Mode)
	}
	return nil
}

func (c *Certificate) issuer() Issuer {
	if c.Issuer == nil {
		return SelfSigned
	}
	return c.Issuer
}

// Ensure returns the certificate's DER, issuing and storing it in etcd first
// if no certificate of this name exists there yet. Concurrent Ensures, from
// this process or any other, all return the same certificate: the first
// one stored. For ManagedKey it also loads the private key (see PrivateKey).
func (c *Certificate) Ensure(ctx context.Context, kv clientv3.KV) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.certDER != nil {
		return c.certDER, nil
	}
	certKey, keyKey := c.Namespace.CertificateKey(c.Name), c.Namespace.privateKeyKey(c.Name)

	// Fast path: most Ensures find the certificate already there.
	resp, err := kv.Get(ctx, certKey)
	if err != nil {
		return nil, fmt.Errorf("when reading certificate %q: %w", c.Name, err)
	}
	if len(resp.Kvs) == 1 {
		return c.adopt(ctx, kv, resp.Kvs[0].Value)
	}

	certDER, private, err := c.create(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("when issuing certificate %q: %w", c.Name, err)
	}
	puts := []clientv3.Op{clientv3.OpPut(certKey, string(certDER))}
	if private != nil {
		keyDER, err := x509.MarshalPKCS8PrivateKey(private)
		if err != nil {
			return nil, fmt.Errorf("when encoding key of %q: %w", c.Name, err)
		}
		puts = append(puts, clientv3.OpPut(keyKey, string(keyDER)))
	}
	txn, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(certKey), "=", 0)).
		Then(puts...).
		Else(clientv3.OpGet(certKey)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("when storing certificate %q: %w", c.Name, err)
	}
	if txn.Succeeded {
		c.certDER, c.private = certDER, private
		if private != nil {
			c.PublicKey = private.Public().(ed25519.PublicKey)
		}
		return certDER, nil
	}
	// Someone else stored theirs between our Get and our Txn: theirs wins.
	kvs := txn.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("certificate %q vanished while it was being created", c.Name)
	}
	return c.adopt(ctx, kv, kvs[0].Value)
}

// create generates the key (ManagedKey) and signs a new certificate.
func (c *Certificate) create(ctx context.Context, kv clientv3.KV) ([]byte, ed25519.PrivateKey, error) {
	pub := c.PublicKey
	var private ed25519.PrivateKey
	if c.Mode == ManagedKey {
		var err error
		pub, private, err = ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, nil, fmt.Errorf("when generating key: %w", err)
		}
	}
	tmpl := c.Template
	serial, err := NewSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	fillValidity(&tmpl, c.Lifetime)
	der, err := c.issuer().issue(ctx, kv, &tmpl, pub, private)
	if err != nil {
		return nil, nil, err
	}
	return der, private, nil
}

// adopt takes a certificate found in etcd as c's, checking that it is for
// c's key, and loads the stored private key for ManagedKey.
func (c *Certificate) adopt(ctx context.Context, kv clientv3.KV, der []byte) ([]byte, error) {
	_, pub, err := c.parseStored(der)
	if err != nil {
		return nil, err
	}
	switch c.Mode {
	case ExternalKey:
		if !bytes.Equal(pub, c.PublicKey) {
			return nil, fmt.Errorf("certificate %q: %w", c.Name, ErrKeyMismatch)
		}
	case ManagedKey:
		private, err := c.loadPrivateKey(ctx, kv)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(private.Public().(ed25519.PublicKey), pub) {
			return nil, fmt.Errorf("certificate %q: stored private key does not match the stored certificate", c.Name)
		}
		c.private = private
		c.PublicKey = pub
	}
	c.certDER = der
	return der, nil
}

// parseStored parses der, found in etcd as c's certificate, and returns it
// with its key, which must be ed25519.
func (c *Certificate) parseStored(der []byte) (*x509.Certificate, ed25519.PublicKey, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("when parsing stored certificate %q: %w", c.Name, err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, nil, fmt.Errorf("stored certificate %q has a %T key, want ed25519", c.Name, cert.PublicKey)
	}
	return cert, pub, nil
}

func (c *Certificate) loadPrivateKey(ctx context.Context, kv clientv3.KV) (ed25519.PrivateKey, error) {
	resp, err := kv.Get(ctx, c.Namespace.privateKeyKey(c.Name))
	if err != nil {
		return nil, fmt.Errorf("when reading key of %q: %w", c.Name, err)
	}
	if len(resp.Kvs) != 1 {
		return nil, fmt.Errorf("certificate %q has no stored key: %w", c.Name, ErrNoPrivateKey)
	}
	key, err := x509.ParsePKCS8PrivateKey(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("when parsing key of %q: %w", c.Name, err)
	}
	private, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("stored key of %q is a %T, want ed25519", c.Name, key)
	}
	return private, nil
}

// PrivateKey returns the private key of a ManagedKey certificate, ensuring
// the certificate first. ExternalKey certificates return ErrNoPrivateKey.
func (c *Certificate) PrivateKey(ctx context.Context, kv clientv3.KV) (ed25519.PrivateKey, error) {
	if _, err := c.Ensure(ctx, kv); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.private == nil {
		return nil, fmt.Errorf("certificate %q: %w", c.Name, ErrNoPrivateKey)
	}
	return c.private, nil
}

// X509 returns the parsed certificate, ensuring it first.
func (c *Certificate) X509(ctx context.Context, kv clientv3.KV) (*x509.Certificate, error) {
	der, err := c.Ensure(ctx, kv)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// issue makes *Certificate an Issuer: c signs tmpl as a CA.
func (c *Certificate) issue(ctx context.Context, kv clientv3.KV, tmpl *x509.Certificate, pub ed25519.PublicKey, _ ed25519.PrivateKey) ([]byte, error) {
	parent, err := c.X509(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("when ensuring issuer %q: %w", c.Name, err)
	}
	key, err := c.PrivateKey(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %w", c.Name, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, fmt.Errorf("when signing with %q: %w", c.Name, err)
	}
	return der, nil
}

// EnsureFresh is Ensure for a certificate with a Lifetime: when the stored
// certificate has used up half of its validity, or more, it issues a new
// one with Reissue and returns that. Without a Lifetime it is Ensure.
func (c *Certificate) EnsureFresh(ctx context.Context, kv clientv3.KV) ([]byte, error) {
	der, err := c.Ensure(ctx, kv)
	if err != nil || c.Lifetime == 0 {
		return der, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("when parsing certificate %q: %w", c.Name, err)
	}
	if !HalfUsed(cert, time.Now()) {
		return der, nil
	}
	return c.Reissue(ctx, kv)
}

// HalfUsed says whether, at now, half of cert's validity period or more
// has passed: the point at which Cairn renews a certificate, leaving the
// other half for retries.
func HalfUsed(cert *x509.Certificate, now time.Time) bool {
	half := cert.NotAfter.Sub(cert.NotBefore) / 2
	return !now.Before(cert.NotBefore.Add(half))
}

// Prepare is EnsureFresh for a caller that writes the certificate in a
// transaction of its own, next to keys of its own, so that both change at
// once. stored is the value of c's key as the caller just read it (nil
// when none is stored). Prepare returns stored while it is fresh, with no
// put; otherwise a new certificate and the put that stores it. The
// caller's transaction must compare the key's mod revision with the one
// it read, and read again when that fails. Only ExternalKey certificates
// can be prepared: a ManagedKey one would store a private key too.
func (c *Certificate) Prepare(ctx context.Context, kv clientv3.KV, stored []byte) (der []byte, put *clientv3.Op, err error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	if c.Mode != ExternalKey {
		return nil, nil, fmt.Errorf("certificate %q: only external key certificates can be prepared", c.Name)
	}
	if stored != nil {
		cert, pub, err := c.parseStored(stored)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(pub, c.PublicKey) {
			return nil, nil, fmt.Errorf("certificate %q: %w", c.Name, ErrKeyMismatch)
		}
		if c.Lifetime == 0 || !HalfUsed(cert, time.Now()) {
			return stored, nil, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	der, _, err = c.create(ctx, kv)
	if err != nil {
		return nil, nil, fmt.Errorf("when issuing certificate %q: %w", c.Name, err)
	}
	op := clientv3.OpPut(c.Namespace.CertificateKey(c.Name), string(der))
	return der, &op, nil
}

// Reissue issues a new certificate for c's key, with a fresh serial and
// validity period, and stores it in place of the one stored before, if
// any. The old one stays valid until it expires or is revoked: renewal
// is not revocation. Only ExternalKey certificates can be reissued; a
// ManagedKey one would need a new key, which its holders would not have.
func (c *Certificate) Reissue(ctx context.Context, kv clientv3.KV) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Mode != ExternalKey {
		return nil, fmt.Errorf("certificate %q: only external key certificates can be reissued", c.Name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	der, _, err := c.create(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("when reissuing certificate %q: %w", c.Name, err)
	}
	if _, err := kv.Put(ctx, c.Namespace.CertificateKey(c.Name), string(der)); err != nil {
		return nil, fmt.Errorf("when storing reissued certificate %q: %w", c.Name, err)
	}
	c.certDER = der
	return der, nil
}

// Sign issues a certificate of tmpl for pub (an ed25519 or ECDSA public
// key), signed by c as a CA, valid for lifetime (fillValidity), without
// keeping it in etcd: for short-lived leaves whose holders draw a new key
// and ask again rather than look a certificate up by name.
func (c *Certificate) Sign(ctx context.Context, kv clientv3.KV, tmpl x509.Certificate, pub crypto.PublicKey, lifetime time.Duration) ([]byte, error) {
	switch pub.(type) {
	case ed25519.PublicKey, *ecdsa.PublicKey:
	default:
		return nil, fmt.Errorf("cannot certify a %T key: want ed25519 or ECDSA", pub)
	}
	parent, err := c.X509(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("when ensuring issuer %q: %w", c.Name, err)
	}
	key, err := c.PrivateKey(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %w", c.Name, err)
	}
	serial, err := NewSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	fillValidity(&tmpl, lifetime)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, parent, pub, key)
	if err != nil {
		return nil, fmt.Errorf("when signing with %q: %w", c.Name, err)
	}
	return der, nil
}
