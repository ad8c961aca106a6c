package main

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

func newTakeOwnershipCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "takeownership",
		Short: "Trade the owner key for the owner certificate of a new cluster",
		Long: "takeownership proves possession of the owner key (made by `params\n" +
			"bootstrap`) to a curator of the new cluster (AAA.Escrow) and stores the\n" +
			"owner certificate, the cluster CA and the endpoint in the configuration\n" +
			"directory. The CA is not known before, so the first connection trusts the\n" +
			"server's certificate on first use; once the CA is returned, the server\n" +
			"certificate of that very session must chain to it, or nothing is stored.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := a.withTimeout(cmd.Context())
			defer cancel()
			return a.takeOwnership(ctx)
		},
	}
}

// escrowResult is what a successful escrow brought home.
type escrowResult struct {
	ownerCert, caDER []byte
	// serverID is the node that served the escrow.
	serverID string
}

func (a *app) takeOwnership(ctx context.Context) error {
	dir, err := a.dir()
	if err != nil {
		return err
	}
	key, err := readOwnerKey(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no owner key in %s: the owner key is made by `cairnctl params bootstrap`, whose parameters the cluster was bootstrapped with: %w", dir, err)
	}
	if err != nil {
		return err
	}
	s, err := readSettings(dir)
	if err != nil {
		return err
	}
	endpoints := a.endpoints
	if len(endpoints) == 0 {
		endpoints = s.Endpoints
	}
	if len(endpoints) == 0 {
		return errors.New("takeownership needs --endpoint HOST:PORT of a curator of the new cluster")
	}
	var res *escrowResult
	used, err := failover(ctx, endpoints, escrowCredentials(), a.timing(), "taking ownership", func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		res, err = escrowOn(ctx, conn, key)
		return err
	})
	if err != nil {
		return err
	}
	if err := writeCertificate(dir, caCertFile, res.caDER); err != nil {
		return err
	}
	if err := writeCertificate(dir, ownerCertFile, res.ownerCert); err != nil {
		return err
	}
	s.addEndpoints(endpoints)
	if err := writeSettings(dir, s); err != nil {
		return err
	}
	a.printf("Took ownership of the cluster through %s (node %s).\n", used, res.serverID)
	a.printf("Cluster CA fingerprint: SHA256:%s\n", fingerprint(res.caDER))
	a.printf("Stored the owner certificate, the CA and the endpoints %v in %s;\nlater commands may leave out --endpoint.\n", s.Endpoints, dir)
	return nil
}

// escrowCredentials are the credentials of AAA.Escrow: they trust the
// server's certificate on first use, and escrowOn checks it afterwards
// against the CA the server returned.
func escrowCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13,
		// There is no CA to verify against yet. The certificate of this
		// session is checked once the CA is known (checkNodeCertificate),
		// and the owner's proof is bound to this session, so a server that
		// is not of the cluster gets nothing it could use elsewhere.
		InsecureSkipVerify: true,
	})
}

// escrowOn runs the exchange of AAA.Escrow on conn.
func escrowOn(ctx context.Context, conn *grpc.ClientConn, key ed25519.PrivateKey) (*escrowResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := api.NewAAAClient(conn).Escrow(ctx)
	if err != nil {
		return nil, err
	}
	hello := &api.EscrowFromClient_Hello{OwnerPublicKey: key.Public().(ed25519.PublicKey)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: hello}}); err != nil {
		return nil, recvError(stream, err)
	}
	msg, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	challenge := msg.GetChallenge()
	if challenge == nil {
		return nil, fmt.Errorf("server answered the hello with %T, want a challenge", msg.GetStep())
	}
	cs, ok := rpc.TLSConnectionState(stream.Context())
	if !ok {
		return nil, errors.New("escrow stream runs without TLS")
	}
	payload, err := rpc.EscrowProofPayload(challenge.GetNonce(), cs)
	if err != nil {
		return nil, fmt.Errorf("when building the proof: %w", err)
	}
	proof := &api.EscrowFromClient_Proof{Signature: ed25519.Sign(key, payload)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Proof_{Proof: proof}}); err != nil {
		return nil, recvError(stream, err)
	}
	msg, err = stream.Recv()
	if err != nil {
		return nil, err
	}
	result := msg.GetResult()
	if result == nil {
		return nil, fmt.Errorf("server answered the proof with %T, want a result", msg.GetStep())
	}
	stream.CloseSend()
	serverID, err := checkNodeCertificate(cs.PeerCertificates, result.GetCaCertificate())
	if err != nil {
		return nil, fmt.Errorf("refusing the result: the server of this session is not a node of the cluster whose CA it returned: %w", err)
	}
	// OwnerCredentials checks the owner certificate: issued by the CA, for
	// our key, of the owner profile.
	if _, err := rpc.OwnerCredentials(key, result.GetOwnerCertificate(), result.GetCaCertificate()); err != nil {
		return nil, fmt.Errorf("refusing the returned owner certificate: %w", err)
	}
	return &escrowResult{ownerCert: result.GetOwnerCertificate(), caDER: result.GetCaCertificate(), serverID: serverID}, nil
}

// recvError turns io.EOF from Send into the stream's real status, which
// only Recv reveals.
func recvError(stream grpc.BidiStreamingClient[api.EscrowFromClient, api.EscrowFromServer], err error) error {
	if _, rerr := stream.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// checkNodeCertificate checks that certs, a server's chain as presented in
// a TLS session, start with a node certificate valid under the CA of
// caDER, and returns the node's ID.
func checkNodeCertificate(certs []*x509.Certificate, caDER []byte) (string, error) {
	if len(certs) == 0 {
		return "", errors.New("server presented no certificate")
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", fmt.Errorf("when parsing the returned CA certificate: %w", err)
	}
	if !ca.IsCA {
		return "", fmt.Errorf("returned CA certificate %q is not a CA", ca.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf := certs[0]
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:     roots,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return "", fmt.Errorf("server certificate %q: %w", leaf.Subject.CommonName, err)
	}
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok {
		return "", fmt.Errorf("server certificate %q has a %T key, want ed25519", leaf.Subject.CommonName, leaf.PublicKey)
	}
	if ou := leaf.Subject.OrganizationalUnit; len(ou) != 1 || ou[0] != identity.NodeUnit {
		return "", fmt.Errorf("server certificate %q has OU %q, not that of a node certificate", leaf.Subject.CommonName, ou)
	}
	id := identity.NodeID(pub)
	if leaf.Subject.CommonName != id {
		return "", fmt.Errorf("server certificate names %q, but its key is node %s", leaf.Subject.CommonName, id)
	}
	return id, nil
}

// fingerprint is the SHA-256 of a DER certificate, in hex.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
