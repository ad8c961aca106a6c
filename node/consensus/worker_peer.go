package consensus

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// runPeerRenewal renews this member's etcd peer certificate once half of
// its lifetime has passed: it issues a new one from the peer CA (a voting
// member can sign with it) and writes it over peer.pem. etcd reads the
// certificate file at each handshake, so new peer connections use the new
// certificate and nothing restarts.
//
// Learners wait for their promotion, since they cannot write to etcd.
func (s *Service) runPeerRenewal(inst *instance) supervisor.Runnable {
	return func(ctx context.Context) error {
		if err := s.waitVoting(ctx); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		log := supervisor.Logger(ctx)
		for {
			cert, err := s.peerCertificateFile()
			if err != nil {
				return err
			}
			due := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
			log.Infof("etcd peer certificate valid until %s; renewing it from %s", cert.NotAfter.UTC().Format(time.RFC3339), due.UTC().Format(time.RFC3339))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(due)):
			}
			der, err := peerCertificate(peerCA(), s.cfg.Name, s.cfg.PeerIP, s.cfg.PrivateKey.Public()).Reissue(ctx, inst.client)
			if err != nil {
				return fmt.Errorf("when renewing the etcd peer certificate: %w", err)
			}
			if err := writeFile(s.tlsPath(peerCertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
				return err
			}
			log.Infof("Renewed the etcd peer certificate")
		}
	}
}

// peerCertificateFile reads and parses this member's peer certificate.
func (s *Service) peerCertificateFile() (*x509.Certificate, error) {
	b, err := os.ReadFile(s.tlsPath(peerCertFile))
	if err != nil {
		return nil, fmt.Errorf("when reading the etcd peer certificate: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the etcd peer certificate file holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("when parsing the etcd peer certificate: %w", err)
	}
	return cert, nil
}
