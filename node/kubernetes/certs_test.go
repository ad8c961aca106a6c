package kubernetes

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// TestLoopbackServing serves TLS on the loopback with the certificate
// loopbackServing writes, and a client that trusts that certificate alone
// reaches it both as 127.0.0.1 and as localhost; the key is its owner's
// alone, and the certificate ends when asked.
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
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: name})
		if err != nil {
			t.Errorf("as %s: %v", name, err)
			continue
		}
		c.Close()
	}
	// Another name is refused: the certificate is for the loopback only.
	if c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "10.42.0.10"}); err == nil {
		c.Close()
		t.Error("the certificate was taken for 10.42.0.10")
	}
}
