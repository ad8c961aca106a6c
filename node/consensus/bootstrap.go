package consensus

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/supervisor"
)

// Files in the peer TLS directory. The peer certificate is written last:
// its presence says the directory is complete.
const (
	caFile       = "ca.pem"
	crlFile      = "crl.der"
	peerKeyFile  = "peer-key.pem"
	peerCertFile = "peer.pem"
)

func (s *Service) peerTLSReady() bool {
	_, err := os.Stat(s.tlsPath(peerCertFile))
	return err == nil
}

// bootstrap turns an empty DataDir into a single-member cluster that can
// restart with peer mTLS: it starts etcd with peers on localhost without
// TLS, creates the cluster CA, the peer CA and this member's peer
// certificate in it, moves the member's advertised peer URL to the real
// one, stops etcd and writes the TLS files. It is safe to repeat after a
// crash at any point: every step is idempotent, and nothing counts as done
// until the last file is written.
func (s *Service) bootstrap(ctx context.Context) error {
	lg := supervisor.Logger(ctx)
	lg.Infof("Bootstrapping a new cluster: starting etcd with localhost peers and no TLS")
	marker.Log(lg, marker.EtcdStarting)
	inst, err := s.start(ctx, s.bootstrapConfig(), false)
	if err != nil {
		return fmt.Errorf("when starting etcd for bootstrap: %w", err)
	}
	defer inst.close()

	// The cluster CA is not etcd's own, but the rest of the node expects
	// it once the cluster exists.
	if _, err := ClusterCA().Ensure(ctx, inst.client); err != nil {
		return fmt.Errorf("when creating cluster CA: %w", err)
	}
	caDER, peerDER, crlDER, err := issuePeer(ctx, inst.client, s.cfg.Name, s.cfg.PeerIP, s.cfg.PrivateKey.Public())
	if err != nil {
		return err
	}
	id := uint64(inst.e.Server.MemberID())
	if _, err := inst.client.MemberUpdate(ctx, id, []string{s.cfg.PeerURL()}); err != nil {
		return fmt.Errorf("when advertising peer URL %s: %w", s.cfg.PeerURL(), err)
	}
	lg.Infof("CAs and peer certificate created, member %x now advertises %s; restarting with peer TLS", id, s.cfg.PeerURL())
	inst.close()
	return s.writeTLSFiles(caDER, crlDER, peerDER)
}

// writeJoinFiles writes what AddLearner gave us, so that etcd can start
// with peer TLS and join.
func (s *Service) writeJoinFiles() error {
	j := s.cfg.Join
	if err := j.validate(s.cfg.PrivateKey.Public()); err != nil {
		return fmt.Errorf("invalid join data: %w", err)
	}
	return s.writeTLSFiles(j.CACertificate, j.CRL, j.PeerCertificate)
}

func (s *Service) writeTLSFiles(caDER, crlDER, peerDER []byte) error {
	return s.writeTLSFilesTo(s.tlsDir(), caDER, crlDER, peerDER)
}

// writeTLSFilesTo writes the peer TLS files into dir.
func (s *Service) writeTLSFilesTo(dir string, caDER, crlDER, peerDER []byte) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(s.cfg.PrivateKey)
	if err != nil {
		return fmt.Errorf("when encoding peer key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("when creating peer TLS directory: %w", err)
	}
	// etcd reads the CRL as DER, everything else as PEM.
	if err := writeFile(filepath.Join(dir, crlFile), crlDER); err != nil {
		return err
	}
	for _, f := range []struct {
		name, kind string
		der        []byte
	}{
		{caFile, "CERTIFICATE", caDER},
		{peerKeyFile, "PRIVATE KEY", keyDER},
		{peerCertFile, "CERTIFICATE", peerDER},
	} {
		if err := writeFile(filepath.Join(dir, f.name), pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})); err != nil {
			return err
		}
	}
	return nil
}

// writeFile replaces path atomically with data, readable only by us.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("when writing %s: %w", filepath.Base(path), err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("when writing %s: %w", filepath.Base(path), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("when syncing %s: %w", filepath.Base(path), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("when writing %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("when writing %s: %w", filepath.Base(path), err)
	}
	return nil
}
