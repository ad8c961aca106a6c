package consensus

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// crlGrace is how long a new revocation waits before it reaches the CRL
// file that etcd checks peers against.
const crlGrace = 3 * time.Second

// runCRL keeps the CRL file that etcd checks peer certificates against in
// step with the peer CA's revocations stored in etcd: a member removed
// with RemoveMember is refused at its next connection.
//
// Learners wait for their promotion, since they serve no watches.
func (s *Service) runCRL(inst *instance) supervisor.Runnable {
	return func(ctx context.Context) error {
		if err := s.waitVoting(ctx); err != nil {
			return err
		}
		crl := peerCA().WatchCRL(inst.client)
		defer crl.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for first := true; ; first = false {
			der, err := crl.Get(ctx)
			if err != nil {
				return fmt.Errorf("when following the CRL: %w", err)
			}
			if !first {
				// See RemoveMember.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(crlGrace):
				}
			}
			if err := s.updateCRL(der); err != nil {
				return err
			}
		}
	}
}

// updateCRL writes the CRL der into the file etcd reads, unless the file
// already lists the same revocations (the CRL number tells).
func (s *Service) updateCRL(der []byte) error {
	if old, err := os.ReadFile(s.tlsPath(crlFile)); err == nil {
		prev, err1 := x509.ParseRevocationList(old)
		next, err2 := x509.ParseRevocationList(der)
		if err1 == nil && err2 == nil && prev.Number.Cmp(next.Number) == 0 {
			return nil
		}
	}
	return writeFile(s.tlsPath(crlFile), der)
}

// waitVoting waits until this member runs as a voting member: learners
// serve no watches and cannot write.
func (s *Service) waitVoting(ctx context.Context) error {
	w := s.status.Watch()
	defer w.Close()
	for {
		st, err := w.Get(ctx)
		if err != nil {
			return err
		}
		if st.Running && !st.Learner {
			return nil
		}
	}
}
