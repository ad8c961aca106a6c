package identity_test

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
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

func TestPeerIdentityJudgesAtCallTime(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	server := ca.Node(t)
	client := ca.Node(t)
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{client.Certificate()}}
	identity.SetClock(server, func() time.Time { return client.Certificate().NotAfter.Add(time.Second) })
	if got, err := server.PeerIdentity(cs); err == nil {
		t.Errorf("PeerIdentity() after the certificate expired = %+v, want an error", got)
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
