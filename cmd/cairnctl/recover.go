package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/etcdsnapshot"
	"cairn.dev/cairn/proto/api"
)

// Where a backup holds the cluster CA: node/consensus's PKINamespace,
// certificate "ca" (pkg/pki's layout). recover_test.go checks that they
// agree.
const (
	backupCACertificateKey = "pki/certs/ca/cert"
	backupCAKeyKey         = "pki/certs/ca/key"
)

const (
	// leaderCheckTimeout bounds asking the curators whether the cluster
	// still has a leader before a recovery.
	leaderCheckTimeout = 10 * time.Second
	// recoverChunkSize is the size of the data pieces of a Recover call,
	// under the request limit of node/rpc (256 KiB).
	recoverChunkSize = 128 << 10
	// mintedLifetime is the lifetime of an owner certificate cairnctl
	// issues itself from a backup's CA key; minFreshness is how long the
	// stored owner certificate must still be valid to be used instead.
	mintedLifetime = time.Hour
	minFreshness   = 10 * time.Minute
)

func newRecoverCommand(a *app) *cobra.Command {
	var from, node string
	cmd := &cobra.Command{
		Use:   "recover --from FILE --node ID",
		Short: "Rebuild a cluster that lost its quorum for good from a backup, on a surviving consensus member",
		Long: "recover sends the backup FILE (from `cairnctl cluster backup`) to node ID, a\n" +
			"consensus member that survived the loss of its cluster's quorum. The node\n" +
			"keeps it, reboots, and its etcd restores it as a new cluster of this one\n" +
			"member; its curator then decommissions the other members of the backup's\n" +
			"cluster, which must never come back with their disks. Every change after\n" +
			"the backup is lost. docs/recovery.md describes the whole procedure.\n\n" +
			"cairnctl first checks that FILE is a backup of this context's cluster, and\n" +
			"refuses while a curator still answers: a cluster with a leader is not\n" +
			"recovered, it is repaired. When the stored owner certificate has expired\n" +
			"(no curator is left to renew it), cairnctl issues itself a short-lived one\n" +
			"with the CA key in FILE.\n\n" +
			"The node is reached as for `cairnctl logs`: give --node-endpoint ID=HOST:PORT\n" +
			"when no curator can say where it is. --timeout defaults to 10m here.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" || node == "" {
				return errors.New("give --from FILE and --node ID")
			}
			if err := checkNodeID(node); err != nil {
				return err
			}
			a.transferTimeout(cmd)
			return a.ownerRun(func(ctx context.Context, o *owner, _ []string) error { return a.recover(ctx, o, from, node) })(cmd, args)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "backup file to rebuild the cluster from")
	cmd.Flags().StringVar(&node, "node", "", "ID of the surviving consensus member to rebuild it on")
	return cmd
}

// backupFile is a backup checked before it is sent.
type backupFile struct {
	path     string
	size     int64
	sha256   []byte
	revision int64
	caKey    ed25519.PrivateKey
	ca       *x509.Certificate
}

// openBackup checks that the file at path is a backup of the cluster of
// CA caDER and reads what a recovery needs of it.
func openBackup(path string, caDER []byte) (*backupFile, error) {
	f, err := etcdsnapshot.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s is not a usable backup: %w", path, err)
	}
	defer f.Close()
	certDER, err := f.Get(backupCACertificateKey)
	if err != nil {
		return nil, fmt.Errorf("%s holds no cluster CA: %w", path, err)
	}
	if !bytes.Equal(certDER, caDER) {
		return nil, fmt.Errorf("%s is a backup of another cluster: its CA (SHA256:%s) is not this context's (SHA256:%s)", path, fingerprint(certDER), fingerprint(caDER))
	}
	ca, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("when parsing the backup's CA certificate: %w", err)
	}
	keyDER, err := f.Get(backupCAKeyKey)
	if err != nil {
		return nil, fmt.Errorf("%s holds no CA key: %w", path, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("when parsing the backup's CA key: %w", err)
	}
	caKey, ok := k.(ed25519.PrivateKey)
	if !ok || !caKey.Public().(ed25519.PublicKey).Equal(ca.PublicKey) {
		return nil, errors.New("the backup's CA key does not belong to its CA certificate")
	}
	size, sum, err := hashFile(path, sha256.New())
	if err != nil {
		return nil, err
	}
	return &backupFile{path: path, size: size, sha256: sum, revision: f.Revision(), caKey: caKey, ca: ca}, nil
}

// recover rebuilds the cluster from the backup at path on node id.
func (a *app) recover(ctx context.Context, o *owner, path, id string) error {
	b, err := openBackup(path, o.caDER)
	if err != nil {
		return err
	}
	if err := a.ensureOwnerCertificate(o, b); err != nil {
		return err
	}
	if ep, err := a.leaderAnswers(ctx, o); err == nil {
		return fmt.Errorf("the cluster still has a leader (%s answered as the owner): recover only a cluster that lost its quorum for good; repair this one instead (docs/recovery.md)", ep)
	}
	a.printf("No curator answers with a leader. Sending the backup of revision %d (%d bytes) to node %s.\n", b.revision, b.size, id)
	// Finding the node and connecting to it is bounded like the check
	// above: no curator answers, so asking one where the node is fails.
	lookup, cancel := context.WithTimeout(ctx, leaderCheckTimeout)
	defer cancel()
	var res *api.RecoverResponse
	err = a.nodeManagement(lookup, o, id, "sending the backup to node "+id, func(c api.NodeManagementClient) error {
		var err error
		res, err = sendRecover(ctx, c, b)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w (when no curator answers, give --node-endpoint %s=HOST:PORT)", err, id)
	}
	a.printf("Node %s keeps the backup of revision %d and reboots; its etcd restores it as a\n", id, res.GetRevision())
	a.printf("new cluster of one member, and its curator decommissions the other members.\n")
	a.printf("Once `cairnctl --endpoint HOST:PORT node list` answers, add consensus members\nagain with `cairnctl node add-role ID ConsensusMember` (docs/recovery.md).\n")
	return nil
}

// ensureOwnerCertificate replaces the owner certificate o dials with by
// one cairnctl issues itself with the backup's CA key, when the stored one
// has expired or is about to: nobody else can issue one while the cluster
// has no quorum. Whoever holds the backup holds that key anyway.
func (a *app) ensureOwnerCertificate(o *owner, b *backupFile) error {
	cert, err := x509.ParseCertificate(o.certDER)
	if err != nil {
		return fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	now := time.Now()
	if cert.NotAfter.After(now.Add(minFreshness)) {
		return nil
	}
	der, err := mintOwnerCertificate(b, o.key.Public().(ed25519.PublicKey), now)
	if err != nil {
		return err
	}
	a.printf("The owner certificate expired at %s; using one issued with the backup's CA key, valid for %s.\n", cert.NotAfter.UTC().Format(time.RFC3339), mintedLifetime)
	if err := o.setCertificate(der); err != nil {
		return fmt.Errorf("with the owner certificate issued from the backup: %w", err)
	}
	return nil
}

// mintOwnerCertificate issues an owner certificate for pub with the CA key
// of the backup b, valid from a little before now for mintedLifetime.
func mintOwnerCertificate(b *backupFile, pub ed25519.PublicKey, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("when choosing a serial number: %w", err)
	}
	tmpl := identity.OwnerCertificateTemplate()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-5 * time.Minute)
	tmpl.NotAfter = now.Add(mintedLifetime)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, b.ca, pub, b.caKey)
	if err != nil {
		return nil, fmt.Errorf("when issuing an owner certificate with the backup's CA key: %w", err)
	}
	return der, nil
}

// leaderAnswers asks the curators, briefly, whether the cluster has a
// leader, and returns the endpoint that answered when one did.
func (a *app) leaderAnswers(ctx context.Context, o *owner) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderCheckTimeout)
	defer cancel()
	return failover(ctx, o.endpoints, o.creds, o.timing, "asking the curators for a leader", func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := api.NewManagementClient(conn).GetClusterInfo(ctx, &api.GetClusterInfoRequest{})
		return err
	})
}

// sendRecover sends the backup b to a node's Recover.
func sendRecover(ctx context.Context, c api.NodeManagementClient, b *backupFile) (*api.RecoverResponse, error) {
	f, err := os.Open(b.path)
	if err != nil {
		return nil, fmt.Errorf("when opening the backup: %w", err)
	}
	defer f.Close()
	stream, err := c.Recover(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&api.RecoverRequest{Header: &api.RecoverHeader{Size: b.size, Sha256: b.sha256}}); err != nil {
		return stream.CloseAndRecv()
	}
	buf := make([]byte, recoverChunkSize)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			if err := stream.Send(&api.RecoverRequest{Data: buf[:n]}); err != nil {
				// The node ended the call: CloseAndRecv says why.
				return stream.CloseAndRecv()
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("when reading the backup: %w", err)
		}
	}
	return stream.CloseAndRecv()
}
