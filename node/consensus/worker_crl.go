package consensus

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/pkg/supervisor"
)

// crlGrace is how long a new revocation waits before it reaches the CRL
// file that etcd checks peers against.
const crlGrace = 3 * time.Second

// runCRL keeps the CRL file that etcd checks peer certificates against in
// step with the revocations stored in etcd: a member removed with
// RemoveMember is refused at its next connection.
//
// Learners wait for their promotion, since they serve no watches.
func (s *Service) runCRL(inst *instance) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := s.status.Watch()
		defer w.Close()
		for {
			st, err := w.Get(ctx)
			if err != nil {
				return err
			}
			if st.Running && !st.Learner {
				break
			}
		}
		ca := ClusterCA()
		caCert, err := ca.X509(ctx, inst.client)
		if err != nil {
			return fmt.Errorf("when reading cluster CA: %w", err)
		}
		key, err := ca.PrivateKey(ctx, inst.client)
		if err != nil {
			return fmt.Errorf("when reading cluster CA key: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		prefix := ca.RevocationPrefix()
		for {
			resp, err := inst.client.Get(ctx, prefix, clientv3.WithPrefix())
			if err != nil {
				return fmt.Errorf("when reading revocations: %w", err)
			}
			if err := s.updateCRL(caCert, key, resp); err != nil {
				return err
			}
			wctx, cancel := context.WithCancel(ctx)
			wch := inst.client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
			// Any event, error or end of the watch: read everything again,
			// after crlGrace (see RemoveMember).
			<-wch
			cancel()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(crlGrace):
			}
		}
	}
}

// updateCRL writes a new CRL file when the revocations in resp differ from
// the ones in the file (the CRL number tells).
func (s *Service) updateCRL(caCert *x509.Certificate, key ed25519.PrivateKey, resp *clientv3.GetResponse) error {
	der, err := pki.SignCRL(caCert, key, resp.Kvs)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(s.tlsPath(crlFile)); err == nil {
		prev, err1 := x509.ParseRevocationList(old)
		next, err2 := x509.ParseRevocationList(der)
		if err1 == nil && err2 == nil && prev.Number.Cmp(next.Number) == 0 {
			return nil
		}
	}
	return writeFile(s.tlsPath(crlFile), der)
}
