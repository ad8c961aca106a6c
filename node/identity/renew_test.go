package identity_test

import (
	"crypto/tls"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// TestRenew renews a node's certificate while a server built on its TLS
// configuration keeps running: the next handshake presents the renewed
// certificate, and Renew refuses certificates that are older, of another
// node or of another CA.
func TestRenew(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	key := mustKey(t)
	template := identity.NodeCertificateTemplate(pub(key))
	now := time.Now()
	first := issueBetween(t, ca, template, pub(key), now.Add(-time.Minute), now.Add(time.Hour))
	node := mustNode(t, key, first, ca.DER())

	lis, err := tls.Listen("tcp", "127.0.0.1:0", node.ServerTLSConfig())
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
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	client := ca.Node(t)
	served := func() []byte {
		t.Helper()
		c, err := tls.Dial("tcp", lis.Addr().String(), client.ClientTLSConfig())
		if err != nil {
			t.Fatalf("handshake with the renewing server: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	if got := served(); string(got) != string(first) {
		t.Fatalf("server presents another certificate than its first")
	}

	second := issueBetween(t, ca, template, pub(key), now.Add(-time.Minute), now.Add(2*time.Hour))
	if err := node.Renew(second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got := served(); string(got) != string(second) {
		t.Errorf("after Renew the server presents its old certificate")
	}
	if string(node.Certificate().Raw) != string(second) {
		t.Errorf("Certificate() is not the renewed certificate")
	}

	other := ca.Node(t)
	foreign := identitytest.NewCA(t, "foreign CA")
	for name, der := range map[string][]byte{
		"older":          first,
		"another node's": other.Certificate().Raw,
		"another CA's":   issueBetween(t, foreign, template, pub(key), now, now.Add(3*time.Hour)),
		"garbage":        []byte("not a certificate"),
	} {
		if err := node.Renew(der); err == nil {
			t.Errorf("Renew accepted the %s certificate", name)
		}
	}
	if string(node.Certificate().Raw) != string(second) {
		t.Errorf("a refused Renew changed the certificate")
	}
}
