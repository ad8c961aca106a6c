package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
)

// run runs cairnctl with args against the configuration directory dir,
// in-process, and returns what it printed.
func run(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := runTo(ctx, &out, dir, args...)
	return out.String(), err
}

// runTo runs cairnctl until it returns or ctx ends, printing to out.
func runTo(ctx context.Context, out io.Writer, dir string, args ...string) error {
	a := newApp(out, io.Discard)
	a.now = func() time.Time { return testNow }
	// Loopback connects in far less; a hung endpoint gives way sooner.
	a.connectTimeout = 2 * time.Second
	root := newRootCommand(a)
	if dir != "" {
		args = append([]string{"--config", dir}, args...)
	}
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// syncBuffer is a bytes.Buffer safe for a command writing to it while
// the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// mustRun is run that fails the test on an error.
func mustRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := run(t, dir, args...)
	if err != nil {
		t.Fatalf("cairnctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// testNow is the clock of commands run by tests.
var testNow = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

// testCA is a cluster CA made with crypto/x509, issuing certificates of
// node/identity's profiles.
type testCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{key: key, cert: cert}
}

// mint signs tmpl for pub, valid from an hour ago for a day.
func (ca *testCA) mint(tmpl x509.Certificate, pub ed25519.PublicKey) ([]byte, error) {
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	return x509.CreateCertificate(rand.Reader, &tmpl, ca.cert, pub, ca.key)
}

func (ca *testCA) issue(t *testing.T, tmpl x509.Certificate, pub ed25519.PublicKey) []byte {
	t.Helper()
	der, err := ca.mint(tmpl, pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func (ca *testCA) node(t *testing.T) *identity.Node {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().(ed25519.PublicKey)
	n, err := identity.NewNode(key, ca.issue(t, identity.NodeCertificateTemplate(pub), pub), ca.cert.Raw)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
