package roleserve

import (
	"context"
	"fmt"

	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/resolver"
	"cairn.dev/cairn/pkg/supervisor"
)

// runConnection keeps the one ClientConn through which the other workers
// call the curator leader. Its resolver starts from the cluster directory
// and also knows this node's own curator, which on a new cluster is the
// only one.
func (s *Service) runConnection(ctx context.Context) error {
	m, err := s.membership(ctx)
	if err != nil {
		return err
	}
	creds, err := s.waitCredentials(ctx)
	if err != nil {
		return err
	}
	r := resolver.New(creds, resolver.DirectoryEndpoints(m.ClusterDirectory, portOr(s.cfg.directoryPort, curator.Port)))
	if err := supervisor.Run(ctx, "resolver", r.Run); err != nil {
		return fmt.Errorf("when starting resolver: %w", err)
	}
	conn, err := r.Dial()
	if err != nil {
		return fmt.Errorf("when dialling the curator: %w", err)
	}
	defer conn.Close()
	s.curator.Set(&curatorConn{conn: conn, resolver: r})
	// Unset before the deferred Close, so that nobody picks up a
	// closed connection while this worker restarts.
	defer s.curator.Set(nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	w := s.localCurator.Watch()
	defer w.Close()
	for {
		ap, err := w.Get(ctx)
		if err != nil {
			return fmt.Errorf("when watching the local curator: %w", err)
		}
		local := ""
		if ap.IsValid() {
			local = ap.String()
		}
		r.SetLocal(local)
	}
}
