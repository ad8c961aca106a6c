package identity_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// handshakeResult is how one TLS connection over loopback went.
type handshakeResult struct {
	// serverErr is the server's handshake error.
	serverErr error
	// clientErr is the client's handshake error, or the error reading the
	// server's greeting: in TLS 1.3 a client finishes its handshake before
	// the server has judged the client's certificate.
	clientErr error
	// serverState is the server's view of the connection.
	serverState tls.ConnectionState
}

// handshake connects a client with the client config to a server with the
// server config over loopback TCP. The server greets with "ok" once its
// handshake is done; the client reads the greeting.
func handshake(t *testing.T, server, client *tls.Config) handshakeResult {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type serverResult struct {
		state tls.ConnectionState
		err   error
	}
	served := make(chan serverResult, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			served <- serverResult{err: err}
			return
		}
		defer conn.Close()
		tc := tls.Server(conn, server)
		if err := tc.HandshakeContext(ctx); err != nil {
			served <- serverResult{err: err}
			return
		}
		_, err = tc.Write([]byte("ok"))
		served <- serverResult{state: tc.ConnectionState(), err: err}
	}()

	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dialling: %v", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, client)
	clientErr := tc.HandshakeContext(ctx)
	if clientErr == nil {
		_, clientErr = io.ReadFull(tc, make([]byte, 2))
	}
	conn.Close()
	s := <-served
	return handshakeResult{serverErr: s.err, clientErr: clientErr, serverState: s.state}
}

func TestHandshakes(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	foreign := identitytest.NewCA(t, "foreign CA")
	server := ca.Node(t)
	client := ca.Node(t)
	foreignNode := foreign.Node(t)
	expired := expiredNode(t, ca)
	ownerKey, ownerCert := ca.Owner(t)
	ownerConfig, err := identity.OwnerClientTLSConfig(ownerKey, ownerCert, ca.DER())
	if err != nil {
		t.Fatalf("OwnerClientTLSConfig: %v", err)
	}
	ephemeralKey := mustKey(t)
	ephemeral, err := identity.EphemeralClientTLSConfig(ca.DER(), ephemeralKey)
	if err != nil {
		t.Fatalf("EphemeralClientTLSConfig: %v", err)
	}
	anonymous, err := identity.EphemeralClientTLSConfig(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralClientTLSConfig(nil key): %v", err)
	}
	foreignEphemeral, err := identity.EphemeralClientTLSConfig(foreign.DER(), ephemeralKey)
	if err != nil {
		t.Fatalf("EphemeralClientTLSConfig(foreign CA): %v", err)
	}

	// A client that holds another key than its certificate's.
	wrongKeyClient := client.ClientTLSConfig()
	wrongKeyClient.GetClientCertificate = nil
	wrongKeyClient.Certificates = []tls.Certificate{withKey(client.TLSCertificate(), mustKey(t))}
	// A server that holds another key than its certificate's.
	wrongKeyServer := server.ServerTLSConfig()
	wrongKeyServer.GetCertificate = nil
	wrongKeyServer.Certificates = []tls.Certificate{withKey(server.TLSCertificate(), mustKey(t))}
	// A server that presents the owner certificate.
	ownerServer := server.ServerTLSConfig()
	ownerServer.GetCertificate = nil
	ownerServer.Certificates = ownerConfig.Certificates
	// A client limited to TLS 1.2.
	oldClient := client.ClientTLSConfig()
	oldClient.MinVersion, oldClient.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	// A certificate of the cluster CA that names another node's ID.
	impostorKey := mustKey(t)
	impostorCert := ca.Issue(t, identity.NodeCertificateTemplate(client.PublicKey()), pub(impostorKey))

	// A scraper's metrics certificate.
	metricsKey := mustKey(t)
	metricsConfig, err := identity.MetricsClientTLSConfig(metricsKey, ca.Issue(t, identity.MetricsCertificateTemplate("prometheus"), pub(metricsKey)), ca.DER())
	if err != nil {
		t.Fatalf("MetricsClientTLSConfig: %v", err)
	}
	if _, err := identity.MetricsClientTLSConfig(ownerKey, ownerCert, ca.DER()); err == nil {
		t.Errorf("MetricsClientTLSConfig took the owner certificate")
	}

	// A self-signed certificate that copies a node's profile.
	lookalikeKey := mustKey(t)
	lookalike := selfSignedLike(t, identity.NodeCertificateTemplate(pub(lookalikeKey)), lookalikeKey)

	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
		// wantServerErr and wantClientErr are what each side's error
		// says, "" for none. The side that refuses names the reason; the
		// other side reads the refusal as a TLS alert.
		wantServerErr string
		wantClientErr string
		// wantPeer is what the server learns of the client, when both
		// succeed.
		wantPeer identity.Peer
	}{
		{
			name:     "node to node",
			server:   server.ServerTLSConfig(),
			client:   client.ClientTLSConfig(),
			wantPeer: identity.Peer{Kind: identity.PeerNode, NodeID: client.ID(), PublicKey: client.PublicKey()},
		},
		{
			name:     "owner to node",
			server:   server.ServerTLSConfig(),
			client:   ownerConfig,
			wantPeer: identity.Peer{Kind: identity.PeerOwner, PublicKey: pub(ownerKey)},
		},
		{
			name:     "metrics to node",
			server:   server.ServerTLSConfig(),
			client:   metricsConfig,
			wantPeer: identity.Peer{Kind: identity.PeerMetrics, PublicKey: pub(metricsKey)},
		},
		{
			name:     "ephemeral key to node",
			server:   server.ServerTLSConfig(),
			client:   ephemeral,
			wantPeer: identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: pub(ephemeralKey)},
		},
		{
			name:     "anonymous to node",
			server:   server.ServerTLSConfig(),
			client:   anonymous,
			wantPeer: identity.Peer{Kind: identity.PeerAnonymous},
		},
		{
			name:     "self-signed node lookalike to node",
			server:   server.ServerTLSConfig(),
			client:   rawConfig(lookalike, lookalikeKey),
			wantPeer: identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: pub(lookalikeKey)},
		},
		{
			name:          "client of a foreign CA",
			server:        server.ServerTLSConfig(),
			client:        rawConfig(foreignNode.Certificate().Raw, foreignNode.PrivateKey()),
			wantServerErr: "signed by unknown authority",
			wantClientErr: "remote error",
		},
		{
			name:          "server of a foreign CA",
			server:        foreignNode.ServerTLSConfig(),
			client:        client.ClientTLSConfig(),
			wantServerErr: "remote error",
			wantClientErr: "refusing server: peer certificate",
		},
		{
			name:          "ephemeral client pinning a foreign CA",
			server:        server.ServerTLSConfig(),
			client:        foreignEphemeral,
			wantServerErr: "remote error",
			wantClientErr: "signed by unknown authority",
		},
		{
			name:          "anonymous client to a server of a foreign CA",
			server:        foreignNode.ServerTLSConfig(),
			client:        anonymous,
			wantServerErr: "remote error",
			wantClientErr: "signed by unknown authority",
		},
		{
			name:          "expired client",
			server:        server.ServerTLSConfig(),
			client:        expired.ClientTLSConfig(),
			wantServerErr: "has expired",
			wantClientErr: "remote error",
		},
		{
			name:          "expired server",
			server:        expired.ServerTLSConfig(),
			client:        client.ClientTLSConfig(),
			wantServerErr: "remote error",
			wantClientErr: "has expired",
		},
		{
			name:          "client with the wrong key",
			server:        server.ServerTLSConfig(),
			client:        wrongKeyClient,
			wantServerErr: "invalid signature by the client certificate",
			wantClientErr: "remote error",
		},
		{
			name:          "server with the wrong key",
			server:        wrongKeyServer,
			client:        client.ClientTLSConfig(),
			wantServerErr: "remote error",
			wantClientErr: "invalid signature by the server certificate",
		},
		{
			name:          "server presenting the owner certificate",
			server:        ownerServer,
			client:        client.ClientTLSConfig(),
			wantServerErr: "remote error",
			wantClientErr: "incompatible key usage",
		},
		{
			name:          "client impersonating another node",
			server:        server.ServerTLSConfig(),
			client:        rawConfig(impostorCert, impostorKey),
			wantServerErr: "is not the ID of its key",
			wantClientErr: "remote error",
		},
		{
			name:          "server impersonating another node",
			server:        rawConfig(impostorCert, impostorKey),
			client:        client.ClientTLSConfig(),
			wantServerErr: "remote error",
			wantClientErr: "is not the ID of its key",
		},
		{
			name:          "TLS 1.2 client",
			server:        server.ServerTLSConfig(),
			client:        oldClient,
			wantServerErr: "unsupported versions",
			wantClientErr: "remote error",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := handshake(t, tc.server, tc.client)
			checkErr(t, "server", r.serverErr, tc.wantServerErr)
			checkErr(t, "client", r.clientErr, tc.wantClientErr)
			if r.serverErr != nil || r.clientErr != nil {
				return
			}
			if r.serverState.Version != tls.VersionTLS13 {
				t.Errorf("negotiated version %#x, want TLS 1.3", r.serverState.Version)
			}
			got, err := server.PeerIdentity(r.serverState)
			if err != nil {
				t.Fatalf("PeerIdentity: %v", err)
			}
			// The certificate's serial and expiry are TestPeerIdentity's.
			if diff := cmp.Diff(tc.wantPeer, got, cmpopts.IgnoreFields(identity.Peer{}, "Serial", "NotAfter")); diff != "" {
				t.Errorf("PeerIdentity (-want +got):\n%s", diff)
			}
		})
	}
}

// checkErr reports err unless it contains want, or is nil when want is "".
func checkErr(t *testing.T, side string, err error, want string) {
	t.Helper()
	switch {
	case err == nil && want != "":
		t.Errorf("%s error = nil, want an error containing %q", side, want)
	case err != nil && (want == "" || !strings.Contains(err.Error(), want)):
		t.Errorf("%s error = %q, want %q", side, err, want)
	}
}

func TestClientConfigsRefuseBadInput(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	node := ca.Node(t)
	ownerKey, ownerCert := ca.Owner(t)
	for _, tc := range []struct {
		name    string
		build   func() (*tls.Config, error)
		wantErr string
	}{
		{"owner config with a node certificate", func() (*tls.Config, error) {
			return identity.OwnerClientTLSConfig(node.PrivateKey(), node.Certificate().Raw, ca.DER())
		}, "want owner"},
		{"owner config with another key", func() (*tls.Config, error) {
			return identity.OwnerClientTLSConfig(node.PrivateKey(), ownerCert, ca.DER())
		}, "not for this private key"},
		{"owner config with garbage CA", func() (*tls.Config, error) {
			return identity.OwnerClientTLSConfig(ownerKey, ownerCert, []byte{0})
		}, "parsing CA certificate"},
		{"ephemeral config with garbage CA", func() (*tls.Config, error) {
			return identity.EphemeralClientTLSConfig([]byte("garbage"), nil)
		}, "parsing CA certificate"},
		{"ephemeral config with a node certificate as CA", func() (*tls.Config, error) {
			return identity.EphemeralClientTLSConfig(node.Certificate().Raw, nil)
		}, "not marked as a CA"},
		{"ephemeral config with a short key", func() (*tls.Config, error) {
			return identity.EphemeralClientTLSConfig(ca.DER(), ownerKey[:10])
		}, "want 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.build()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("got error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// withKey returns c with key in place of its own private key.
func withKey(c tls.Certificate, key ed25519.PrivateKey) tls.Certificate {
	c.PrivateKey = key
	return c
}
