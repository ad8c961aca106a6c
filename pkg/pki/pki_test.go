package pki

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/fixture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// TestEnsureRace has many goroutines on two clients Ensure the same CA at
// once, each with a Certificate of its own as separate nodes would: they
// must all end up with one CA.
func TestEnsureRace(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	clients := []*clientv3.Client{cl, etcdtest.NewClient(t, cl.Endpoints()[0])}
	ns := &Namespace{Prefix: "pki/"}

	const n = 16
	ders := make([][]byte, n)
	keys := make([]ed25519.PrivateKey, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca := &Certificate{Namespace: ns, Name: "ca", Issuer: SelfSigned, Template: CA("race CA")}
			<-start
			ders[i], errs[i] = ca.Ensure(ctx, clients[i%2])
			if errs[i] == nil {
				keys[i], errs[i] = ca.PrivateKey(ctx, clients[i%2])
			}
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Ensure #%d: %v", i, errs[i])
		}
		if !bytes.Equal(ders[i], ders[0]) {
			t.Errorf("Ensure #%d returned another certificate than #0", i)
		}
		if !keys[i].Equal(keys[0]) {
			t.Errorf("Ensure #%d returned another key than #0", i)
		}
	}
	resp, err := cl.Get(ctx, ns.CertificateKey("ca"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || !bytes.Equal(resp.Kvs[0].Value, ders[0]) {
		t.Errorf("stored CA differs from the one Ensure returned")
	}
	if v := resp.Kvs[0].Version; v != 1 {
		t.Errorf("CA key written %d times, want 1", v)
	}
}

// TestIssueVerifyRevoke issues a server and a client certificate from a CA,
// verifies them against it, and revokes one.
func TestIssueVerifyRevoke(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	ns := &Namespace{Prefix: "cluster"}
	ca := &Certificate{Namespace: ns, Name: "ca", Template: CA("cluster CA")}

	nodePub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	server := &Certificate{
		Namespace: ns, Issuer: ca, Name: "node-cairn-0123",
		Template: Server("cairn-0123", []net.IP{net.IPv4(10, 0, 0, 5)}),
		Mode:     ExternalKey, PublicKey: nodePub,
	}
	client := &Certificate{Namespace: ns, Issuer: ca, Name: "owner", Template: Client("owner")}

	caCert, err := ca.X509(ctx, cl)
	if err != nil {
		t.Fatalf("CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	serverCert, err := server.X509(ctx, cl)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	if _, err := serverCert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "cairn-0123"}); err != nil {
		t.Errorf("server certificate does not verify for its node ID: %v", err)
	}
	if _, err := serverCert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.0.5"}); err != nil {
		t.Errorf("server certificate does not verify for its IP: %v", err)
	}
	if !nodePub.Equal(serverCert.PublicKey) {
		t.Errorf("server certificate is not for the node's key")
	}
	if _, err := server.PrivateKey(ctx, cl); !errors.Is(err, ErrNoPrivateKey) {
		t.Errorf("PrivateKey of an external key certificate: %v, want ErrNoPrivateKey", err)
	}

	clientCert, err := client.X509(ctx, cl)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if _, err := clientCert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify: %v", err)
	}
	if _, err := clientCert.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Errorf("client certificate verifies as a server certificate")
	}

	// A foreign CA's certificate does not verify against ours.
	other := &Certificate{Namespace: &Namespace{Prefix: "other/"}, Name: "ca", Template: CA("cluster CA")}
	otherCert, err := other.X509(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherCert.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Errorf("a CA of another namespace verifies against ours")
	}

	// Same name, another key: refused, the stored one stays.
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	impostor := &Certificate{Namespace: ns, Issuer: ca, Name: "node-cairn-0123", Template: Server("cairn-0123", nil), Mode: ExternalKey, PublicKey: otherPub}
	if _, err := impostor.Ensure(ctx, cl); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("Ensure with another key: %v, want ErrKeyMismatch", err)
	}

	// Revocation.
	crl0 := mustCRL(t, ctx, cl, ca, caCert)
	if len(crl0.RevokedCertificateEntries) != 0 {
		t.Errorf("fresh CRL lists %d entries, want 0", len(crl0.RevokedCertificateEntries))
	}
	for range 2 { // twice: revoking is idempotent
		if err := ca.Revoke(ctx, cl, serverCert.SerialNumber); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
	}
	crl1 := mustCRL(t, ctx, cl, ca, caCert)
	if len(crl1.RevokedCertificateEntries) != 1 || crl1.RevokedCertificateEntries[0].SerialNumber.Cmp(serverCert.SerialNumber) != 0 {
		t.Errorf("CRL after revoking %x: %+v", serverCert.SerialNumber, crl1.RevokedCertificateEntries)
	}
	if crl1.Number.Cmp(crl0.Number) <= 0 {
		t.Errorf("CRL number went from %v to %v, want it to grow", crl0.Number, crl1.Number)
	}
	if err := crl1.CheckSignatureFrom(otherCert); err == nil {
		t.Errorf("CRL verifies against a foreign CA")
	}
}

func mustCRL(t *testing.T, ctx context.Context, kv clientv3.KV, ca *Certificate, caCert *x509.Certificate) *x509.RevocationList {
	t.Helper()
	der, err := ca.CRL(ctx, kv)
	if err != nil {
		t.Fatalf("CRL: %v", err)
	}
	crl, err := x509.ParseRevocationList(der)
	if err != nil {
		t.Fatalf("ParseRevocationList: %v", err)
	}
	if err := crl.CheckSignatureFrom(caCert); err != nil {
		t.Errorf("CRL signature: %v", err)
	}
	return crl
}

func TestEnsureInvalid(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	ns := &Namespace{Prefix: "pki/"}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	ca := &Certificate{Namespace: ns, Name: "ca", Template: CA("ca")}
	self := &Certificate{Namespace: ns, Name: "self", Template: CA("self")}
	self.Issuer = self
	for _, tc := range []struct {
		name string
		c    *Certificate
	}{
		{"no namespace", &Certificate{Name: "x", Template: CA("x")}},
		{"empty name", &Certificate{Namespace: ns, Template: CA("x")}},
		{"slash in name", &Certificate{Namespace: ns, Name: "a/b", Template: CA("x")}},
		{"external without key", &Certificate{Namespace: ns, Issuer: ca, Name: "x", Mode: ExternalKey}},
		{"external self-signed", &Certificate{Namespace: ns, Name: "x", Mode: ExternalKey, PublicKey: pub}},
		{"own issuer", self},
		{"unknown mode", &Certificate{Namespace: ns, Issuer: ca, Name: "x", Mode: 7}},
	} {
		if der, err := tc.c.Ensure(ctx, cl); err == nil {
			t.Errorf("Ensure(%s) = %d bytes, want an error", tc.name, len(der))
		}
	}
}

func TestNewSerial(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		s, err := NewSerial()
		if err != nil {
			t.Fatal(err)
		}
		if s.Sign() <= 0 || s.BitLen() != 127 {
			t.Fatalf("NewSerial() = %x, want a positive 127-bit number", s)
		}
		if seen[s.String()] {
			t.Fatalf("NewSerial() repeated %x", s)
		}
		seen[s.String()] = true
	}
}

// TestWatchCRL follows a CA's CRL while certificates are revoked.
func TestWatchCRL(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	ca := &Certificate{Namespace: &Namespace{Prefix: "pki/"}, Name: "ca", Template: CA("ca")}
	caCert, err := ca.X509(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	w := ca.WatchCRL(cl)
	defer w.Close()
	serials := func() []string {
		t.Helper()
		der, err := w.Get(ctx)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			t.Fatal(err)
		}
		if err := crl.CheckSignatureFrom(caCert); err != nil {
			t.Errorf("CRL signature: %v", err)
		}
		var s []string
		for _, e := range crl.RevokedCertificateEntries {
			s = append(s, e.SerialNumber.Text(16))
		}
		return s
	}
	if got := serials(); len(got) != 0 {
		t.Errorf("first CRL lists %v, want nothing", got)
	}
	a, _ := NewSerial()
	if err := ca.Revoke(ctx, cl, a); err != nil {
		t.Fatal(err)
	}
	if got := serials(); len(got) != 1 || got[0] != a.Text(16) {
		t.Errorf("CRL after revoking %x lists %v", a, got)
	}
}

// TestEnsureFresh gives a certificate a short lifetime and checks that
// EnsureFresh keeps the stored one while it is young and stores a new one,
// with a new serial and a later end, once half of its lifetime is gone.
func TestEnsureFresh(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	ns := &Namespace{Prefix: "fresh/"}
	ca := &Certificate{Namespace: ns, Name: "ca", Template: CA("fresh CA")}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Certificates count in whole seconds: long enough that a renewal
	// at half-life ends in a later second than the first certificate.
	const lifetime = 4 * time.Second
	leaf := func() *Certificate {
		return &Certificate{Namespace: ns, Issuer: ca, Name: "leaf", Template: Client("leaf"),
			Mode: ExternalKey, PublicKey: pub, Lifetime: lifetime}
	}
	first, err := leaf().EnsureFresh(ctx, cl)
	if err != nil {
		t.Fatalf("EnsureFresh: %v", err)
	}
	c1, err := x509.ParseCertificate(first)
	if err != nil {
		t.Fatal(err)
	}
	if got := c1.NotAfter.Sub(c1.NotBefore); got > lifetime+lifetime/10+time.Second {
		t.Errorf("validity period is %v, want about %v", got, lifetime)
	}
	again, err := leaf().EnsureFresh(ctx, cl)
	if err != nil {
		t.Fatalf("EnsureFresh again: %v", err)
	}
	if !bytes.Equal(again, first) {
		t.Errorf("EnsureFresh replaced a certificate that has most of its lifetime left")
	}

	time.Sleep(time.Until(c1.NotBefore.Add(c1.NotAfter.Sub(c1.NotBefore)/2 + 1100*time.Millisecond)))
	if !HalfUsed(c1, time.Now()) {
		t.Fatalf("HalfUsed is false past the middle of the validity period")
	}
	renewed, err := leaf().EnsureFresh(ctx, cl)
	if err != nil {
		t.Fatalf("EnsureFresh at half-life: %v", err)
	}
	c2, err := x509.ParseCertificate(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if c2.SerialNumber.Cmp(c1.SerialNumber) == 0 || !c2.NotAfter.After(c1.NotAfter) {
		t.Errorf("renewed certificate has serial %v and end %v; want a new serial and an end after %v", c2.SerialNumber, c2.NotAfter, c1.NotAfter)
	}
	stored, err := leaf().Ensure(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, renewed) {
		t.Errorf("etcd holds another certificate than the renewed one")
	}
	managed := &Certificate{Namespace: ns, Name: "ca", Template: CA("fresh CA")}
	if _, err := managed.Reissue(ctx, cl); err == nil {
		t.Errorf("Reissue of a managed-key CA succeeded; its holders could not follow a new key")
	}
}

// TestPrepare prepares a leaf certificate as a caller that stores it in a
// transaction of its own does: a new one with its put when none is
// stored, the stored one while it is fresh, a new one again from half its
// lifetime on; a stored certificate for another key is refused.
func TestPrepare(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	ns := &Namespace{Prefix: "prepare/"}
	ca := &Certificate{Namespace: ns, Name: "ca", Template: CA("prepare CA")}
	caDER, err := ca.Ensure(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Whole seconds, as in TestEnsureFresh: the first half of the
	// lifetime must outlast the checks of a fresh certificate.
	const lifetime = 4 * time.Second
	leaf := &Certificate{Namespace: ns, Issuer: ca, Name: "leaf", Template: Client("leaf"),
		Mode: ExternalKey, PublicKey: pub, Lifetime: lifetime}

	first, put, err := leaf.Prepare(ctx, cl, nil)
	if err != nil {
		t.Fatalf("Prepare with nothing stored: %v", err)
	}
	if put == nil {
		t.Fatal("Prepare with nothing stored gave no put")
	}
	c1, err := x509.ParseCertificate(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.CheckSignatureFrom(caCert); err != nil {
		t.Errorf("prepared certificate is not signed by the CA: %v", err)
	}
	if got, _ := c1.PublicKey.(ed25519.PublicKey); !bytes.Equal(got, pub) {
		t.Errorf("prepared certificate is for another key")
	}
	if _, err := cl.Do(ctx, *put); err != nil {
		t.Fatalf("applying the put: %v", err)
	}
	stored, err := leaf.Ensure(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, first) {
		t.Errorf("the put stored another certificate than the prepared one")
	}

	again, put, err := leaf.Prepare(ctx, cl, first)
	if err != nil || put != nil || !bytes.Equal(again, first) {
		t.Errorf("Prepare with a fresh certificate stored = new %v, put %v, %v; want the stored one and no put", !bytes.Equal(again, first), put != nil, err)
	}

	otherPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other := &Certificate{Namespace: ns, Issuer: ca, Name: "leaf", Template: Client("leaf"),
		Mode: ExternalKey, PublicKey: otherPub, Lifetime: lifetime}
	if _, _, err := other.Prepare(ctx, cl, first); !errors.Is(err, ErrKeyMismatch) {
		t.Errorf("Prepare with a certificate for another key stored = %v, want ErrKeyMismatch", err)
	}
	managed := &Certificate{Namespace: ns, Name: "ca", Template: CA("prepare CA")}
	if _, _, err := managed.Prepare(ctx, cl, caDER); err == nil {
		t.Errorf("Prepare of a managed-key CA succeeded; it would store no private key")
	}

	time.Sleep(time.Until(c1.NotBefore.Add(c1.NotAfter.Sub(c1.NotBefore)/2 + 100*time.Millisecond)))
	renewed, put, err := leaf.Prepare(ctx, cl, first)
	if err != nil {
		t.Fatalf("Prepare at half-life: %v", err)
	}
	c2, err := x509.ParseCertificate(renewed)
	if err != nil {
		t.Fatal(err)
	}
	if put == nil || c2.SerialNumber.Cmp(c1.SerialNumber) == 0 {
		t.Errorf("Prepare at half-life gave put %v and serial %v (the stored one's is %v); want a new certificate and its put", put != nil, c2.SerialNumber, c1.SerialNumber)
	}
}
