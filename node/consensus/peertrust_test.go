package consensus_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/pki"
)

// TestPeerTrust knocks on a running member's peer port with one certificate
// after another. Only a current member's peer certificate gets an answer:
// a node certificate of the cluster CA (a worker's), the owner certificate
// and a foreign CA's look-alike of a peer certificate all fail the TLS
// handshake, and a member's own peer certificate is refused once the
// member is removed.
func TestPeerTrust(t *testing.T) {
	ctx := fixture.ContextTimeout(t, 3*time.Minute)
	a := consensustest.NewMember(t, nil)
	a.Start(t)
	stA := a.WaitVoter(t)
	b := consensustest.NewMember(t, nil)
	bKey := b.Config.PrivateKey
	j, err := stA.AddLearner(ctx, b.Config.Name, b.Config.PeerURL(), bKey.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("AddLearner(%s): %v", b.Config.Name, err)
	}
	b.Config.Join = j
	b.Start(t)
	b.WaitVoter(t)

	u, err := url.Parse(a.Config.PeerURL())
	if err != nil {
		t.Fatal(err)
	}
	door := peerDoor{addr: u.Host, roots: x509.NewCertPool()}
	peerCA, err := x509.ParseCertificate(j.CACertificate)
	if err != nil {
		t.Fatalf("peer CA from AddLearner: %v", err)
	}
	door.roots.AddCert(peerCA)

	worker := identitytest.NewKey(t)
	workerCert, clusterCA, err := curator.IssueNodeCertificate(ctx, stA.Client(), worker.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("IssueNodeCertificate: %v", err)
	}
	if string(clusterCA) == string(j.CACertificate) {
		t.Fatal("the peer CA is the cluster CA")
	}
	owner := identitytest.NewKey(t)
	ownerCert, err := curatortest.IssueOwnerCertificate(ctx, stA.Client(), owner.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("IssueOwnerCertificate: %v", err)
	}
	// A foreign CA's certificate that says all a peer certificate of b
	// says: only the issuer differs.
	foreign := identitytest.NewCA(t, "foreign CA")
	foreignCert := foreign.Issue(t, pki.Peer(b.Config.Name, []net.IP{b.Config.PeerIP}), bKey.Public().(ed25519.PublicKey))

	// The positive control: the door does open, for a current member.
	member := tls.Certificate{Certificate: [][]byte{j.PeerCertificate}, PrivateKey: bKey}
	if got, err := door.knock(member); got != peerAccepted {
		t.Fatalf("a current member's peer certificate: %v (%v), want %v", got, err, peerAccepted)
	}
	for _, tc := range []struct {
		name string
		cert tls.Certificate
	}{
		{"node certificate of the cluster CA", tls.Certificate{Certificate: [][]byte{workerCert}, PrivateKey: worker}},
		{"owner certificate of the cluster CA", tls.Certificate{Certificate: [][]byte{ownerCert}, PrivateKey: owner}},
		{"peer certificate of a foreign CA", tls.Certificate{Certificate: [][]byte{foreignCert}, PrivateKey: bKey}},
	} {
		if got, err := door.knock(tc.cert); got != peerRefusedInHandshake {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, peerRefusedInHandshake)
		}
	}

	if err := stA.RemoveMember(ctx, b.Config.Name); err != nil {
		t.Fatalf("RemoveMember(%s): %v", b.Config.Name, err)
	}
	fixture.Eventually(t, time.Minute, "waiting for the removed member's peer certificate to be refused", func() error {
		got, err := door.knock(member)
		switch got {
		case peerRefusedInHandshake, peerRefusedAfterHandshake:
			return nil
		case peerAccepted:
			return errors.New("still accepted")
		}
		return fmt.Errorf("%v: %w", got, err)
	})
}

// peerOutcome is what a peer port made of a client certificate.
type peerOutcome int

const (
	// peerUnreachable: no TCP connection, or no answer in time. It says
	// nothing about the certificate.
	peerUnreachable peerOutcome = iota
	// peerAccepted: the port answered an HTTP request.
	peerAccepted
	// peerRefusedInHandshake: the server was sent the certificate and
	// ended the TLS handshake with an alert, as it does for a certificate
	// that no CA it trusts signed.
	peerRefusedInHandshake
	// peerRefusedAfterHandshake: the handshake completed, then the server
	// closed the connection without a word, as etcd does for a certificate
	// its CRL lists.
	peerRefusedAfterHandshake
)

func (o peerOutcome) String() string {
	return [...]string{"unreachable", "accepted", "refused in the TLS handshake", "refused after the TLS handshake"}[o]
}

// peerDoor is an etcd member's peer port on addr, whose server certificate
// roots verifies.
type peerDoor struct {
	addr  string
	roots *x509.CertPool
}

// knock asks the peer port for its member list over TLS with cert.
//
// It presents cert whatever the server says it accepts: Go's client
// would otherwise send no certificate at all to a server that names
// other CAs, and the server would never judge it. And it speaks TLS 1.2,
// in which the server judges the client's certificate before the
// handshake ends, so that a refusal fails the handshake itself; with TLS
// 1.3 the client's side of the handshake ends first, and the server's
// alert races with the request written next.
func (d peerDoor) knock(cert tls.Certificate) (peerOutcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	host, _, err := net.SplitHostPort(d.addr)
	if err != nil {
		return peerUnreachable, err
	}
	var sent bool
	dialer := tls.Dialer{Config: &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			sent = true
			return &cert, nil
		},
		RootCAs:    d.roots,
		ServerName: host,
		MinVersion: tls.VersionTLS12,
		MaxVersion: tls.VersionTLS12,
	}}
	conn, err := dialer.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		var op *net.OpError
		if sent && errors.As(err, &op) && op.Op == "remote error" {
			return peerRefusedInHandshake, err
		}
		return peerUnreachable, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+d.addr+"/members", nil)
	if err != nil {
		return peerUnreachable, err
	}
	req.Close = true
	err = req.Write(conn)
	if err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(bufio.NewReader(conn), req); err == nil {
			resp.Body.Close()
			return peerAccepted, nil
		}
	}
	if consensus.ClosedByPeer(err) {
		return peerRefusedAfterHandshake, err
	}
	return peerUnreachable, err
}
