package roleserve

import (
	"context"
	"errors"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// workerCredentials publishes the node's credentials: those enrolment
// handed over, or, on the boot that creates the cluster, those the
// controlplane made once etcd ran.
type workerCredentials struct {
	membership   event.Watchable[*Membership]
	bootstrapped event.Watchable[*identity.Node]

	credentials event.Value[*identity.Node]
}

func (w *workerCredentials) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	creds := m.Credentials
	if creds == nil {
		if m.Bootstrap == nil {
			return errors.New("membership has neither credentials nor bootstrap data")
		}
		if creds, err = waitFor(ctx, w.bootstrapped, "the bootstrap"); err != nil {
			return err
		}
	}
	w.credentials.Set(creds)
	supervisor.Logger(ctx).Infof("Credentials of %s", creds.ID())
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}
