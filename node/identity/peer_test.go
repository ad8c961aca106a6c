package identity_test

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// TestPeerIdentity judges connection states made up by hand, as a server
// would see them if a handshake had let the peer through.
func TestPeerIdentity(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	foreign := identitytest.NewCA(t, "foreign CA")
	server := ca.Node(t)
	client := ca.Node(t)
	ownerKey, ownerDER := ca.Owner(t)
	ownerCert, err := x509.ParseCertificate(ownerDER)
	if err != nil {
		t.Fatal(err)
	}
	lookalikeKey := mustKey(t)
	lookalike := selfSignedLike(t, identity.NodeCertificateTemplate(pub(lookalikeKey)), lookalikeKey)

	for _, tc := range []struct {
		name    string
		certs   [][]byte
		want    identity.Peer
		wantErr string
	}{
		{name: "no certificate", want: identity.Peer{Kind: identity.PeerAnonymous}},
		{
			name:  "node",
			certs: [][]byte{client.Certificate().Raw},
			want: identity.Peer{
				Kind: identity.PeerNode, NodeID: client.ID(), PublicKey: client.PublicKey(),
				Serial: client.Certificate().SerialNumber, NotAfter: client.Certificate().NotAfter,
			},
		},
		{
			name:  "owner",
			certs: [][]byte{ownerDER},
			want: identity.Peer{
				Kind: identity.PeerOwner, PublicKey: pub(ownerKey),
				Serial: ownerCert.SerialNumber, NotAfter: ownerCert.NotAfter,
			},
		},
		{
			name:  "self-signed node lookalike",
			certs: [][]byte{lookalike},
			want:  identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: pub(lookalikeKey)},
		},
		{
			name:    "self-signed behind another certificate",
			certs:   [][]byte{lookalike, ca.DER()},
			wantErr: "not valid under the cluster CA",
		},
		{
			name:    "foreign node",
			certs:   [][]byte{foreign.Node(t).Certificate().Raw},
			wantErr: "signed by unknown authority",
		},
		{
			name:    "expired node",
			certs:   [][]byte{expiredNode(t, ca).Certificate().Raw},
			wantErr: "expired",
		},
		{
			name:    "the CA itself",
			certs:   [][]byte{ca.DER()},
			wantErr: "CA certificate",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cs tls.ConnectionState
			for _, der := range tc.certs {
				cert, err := x509.ParseCertificate(der)
				if err != nil {
					t.Fatal(err)
				}
				cs.PeerCertificates = append(cs.PeerCertificates, cert)
			}
			got, err := server.PeerIdentity(cs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("PeerIdentity() = %+v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("PeerIdentity() = %v", err)
			}
			if diff := cmp.Diff(tc.want, got, compareSerials); diff != "" {
				t.Errorf("PeerIdentity() (-want +got):\n%s", diff)
			}
		})
	}
}

// compareSerials compares certificate serial numbers by value.
var compareSerials = cmp.Comparer(func(a, b *big.Int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Cmp(b) == 0
})

// TestPeerIdentityJudgesAtCallTime judges one connection's certificate
// while it is valid, then after it expired and before it was valid: what
// PeerIdentity remembers of a connection's peer holds only while the
// certificate does.
func TestPeerIdentityJudgesAtCallTime(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	server := ca.Node(t)
	client := ca.Node(t)
	cert := client.Certificate()
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	for _, step := range []struct {
		name  string
		at    time.Time
		valid bool
	}{
		{"valid", cert.NotBefore.Add(time.Minute), true},
		{"valid again", cert.NotAfter.Add(-time.Second), true},
		{"expired", cert.NotAfter.Add(time.Second), false},
		{"not yet valid", cert.NotBefore.Add(-time.Second), false},
		{"valid once more", cert.NotBefore.Add(time.Minute), true},
	} {
		identity.SetClock(server, func() time.Time { return step.at })
		got, err := server.PeerIdentity(cs)
		switch {
		case step.valid && (err != nil || got.Kind != identity.PeerNode):
			t.Errorf("%s: PeerIdentity() = %+v, %v; want the node", step.name, got, err)
		case !step.valid && err == nil:
			t.Errorf("%s: PeerIdentity() = %+v, want an error", step.name, got)
		}
	}
}

// TestPeerIdentityRemembersSelfSigned judges one parsed self-signed
// certificate again and again, as the calls of a registering node's
// connection do: what was remembered of it accepts it alone, and refuses
// it behind another certificate and as a server's.
func TestPeerIdentityRemembersSelfSigned(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	server := ca.Node(t)
	key := mustKey(t)
	cert, err := x509.ParseCertificate(selfSignedLike(t, identity.NodeCertificateTemplate(pub(key)), key))
	if err != nil {
		t.Fatal(err)
	}
	alone := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	behind := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert, ca.Cert}}
	want := identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: pub(key)}
	for i := range 3 {
		got, err := server.PeerIdentity(alone)
		if err != nil {
			t.Fatalf("judgement %d: PeerIdentity() = %v", i, err)
		}
		if diff := cmp.Diff(want, got, compareSerials); diff != "" {
			t.Errorf("judgement %d: PeerIdentity() (-want +got):\n%s", i, diff)
		}
		if got, err := server.PeerIdentity(behind); err == nil {
			t.Errorf("judgement %d: PeerIdentity() behind the CA's certificate = %+v, want an error", i, got)
		}
		if got, err := identity.VerifyServer(server, alone.PeerCertificates); err == nil {
			t.Errorf("judgement %d: as a server's certificate = %+v, want an error", i, got)
		}
	}
	if n := identity.Judged(server); n != 1 {
		t.Errorf("%d judgements remembered of one self-signed certificate, want 1", n)
	}
}

// TestPeerIdentityForgets checks that what PeerIdentity remembers of a
// connection's certificate goes with the certificate: a server that has
// seen a million connections does not keep a million judgements.
func TestPeerIdentityForgets(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	server := ca.Node(t)
	const conns = 20
	for range conns {
		// Parsed anew, as each connection's handshake does.
		cert, err := x509.ParseCertificate(ca.Node(t).Certificate().Raw)
		if err != nil {
			t.Fatal(err)
		}
		cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		for range 2 {
			if _, err := server.PeerIdentity(cs); err != nil {
				t.Fatalf("PeerIdentity() = %v", err)
			}
		}
	}
	if n := identity.Judged(server); n != conns {
		t.Errorf("%d judgements remembered after %d connections, want %d", n, conns, conns)
	}
	deadline := time.Now().Add(10 * time.Second)
	for identity.Judged(server) > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := identity.Judged(server); n > 0 {
		t.Errorf("%d judgements remembered after their certificates were collected, want none", n)
	}
}

func TestPeerKindString(t *testing.T) {
	for k, want := range map[identity.PeerKind]string{
		identity.PeerAnonymous:  "anonymous",
		identity.PeerSelfSigned: "self-signed",
		identity.PeerNode:       "node",
		identity.PeerOwner:      "owner",
		identity.PeerKind(9):    "PeerKind(9)",
	} {
		if got := k.String(); got != want {
			t.Errorf("PeerKind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// BenchmarkPeerIdentity judges one connection's certificate once per call,
// as a server does for every call on a connection: a node's, and the
// self-signed one of a node that registers (RegisterNode, then CommitNode
// until it is approved).
func BenchmarkPeerIdentity(b *testing.B) {
	ca := identitytest.NewCA(b, "cluster CA")
	server := ca.Node(b)
	key := mustKey(b)
	for _, bc := range []struct {
		name string
		der  []byte
	}{
		{"node", ca.Node(b).Certificate().Raw},
		{"self-signed", selfSignedLike(b, identity.NodeCertificateTemplate(pub(key)), key)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cert, err := x509.ParseCertificate(bc.der)
			if err != nil {
				b.Fatal(err)
			}
			cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
			for b.Loop() {
				if _, err := server.PeerIdentity(cs); err != nil {
					b.Fatalf("PeerIdentity() = %v", err)
				}
			}
		})
	}
}
