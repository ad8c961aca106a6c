package kubernetes

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestLoopbackServing loads the key pair loopbackServing writes (which
// checks that the key is the certificate's), and a client that trusts
// that certificate alone takes it for 127.0.0.1 and localhost, for a
// server; the key is its owner's alone, and the certificate ends when
// asked.
func TestLoopbackServing(t *testing.T) {
	dir := t.TempDir()
	notAfter := time.Now().Add(36 * time.Hour).Truncate(time.Second)
	certFile, keyFile, err := loopbackServing(dir, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v, %v; want mode 0600", keyFile, fi.Mode(), err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotAfter.Equal(notAfter) {
		t.Errorf("certificate ends %s, want %s", leaf.NotAfter, notAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("as %s: %v", name, err)
		}
	}
	// Another name is refused: the certificate is for the loopback only.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.42.0.10"}); err == nil {
		t.Error("the certificate was taken for 10.42.0.10")
	}
}
