package roleserve

import (
	"context"
	"fmt"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/supervisor"
)

// runCredentials publishes the node's credentials: those enrolment handed
// over, or, on the boot that creates the cluster, those that the
// controlplane got from Membership.Bootstrap once etcd ran.
func (s *Service) runCredentials(ctx context.Context) error {
	m, err := s.membership(ctx)
	if err != nil {
		return err
	}
	creds := m.Credentials
	if creds == nil {
		if m.Bootstrap == nil {
			return fmt.Errorf("membership has neither credentials nor a bootstrap function")
		}
		creds, err = get[*identity.Node](ctx, &s.bootstrapped, notNil)
		if err != nil {
			return fmt.Errorf("when waiting for the bootstrap: %w", err)
		}
	}
	s.credentials.Set(creds)
	supervisor.Logger(ctx).Infof("roleserve: credentials of %s", creds.ID())
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}
