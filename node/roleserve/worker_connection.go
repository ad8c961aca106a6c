package roleserve

import (
	"context"
	"fmt"
	"net/netip"

	"cairn.dev/cairn/node/curator/resolver"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// workerConnection keeps the one ClientConn through which the other
// workers call the curator leader. Its resolver starts from the cluster
// directory, follows the curators the cluster reports, and also knows this
// node's own curator, which on a new cluster is the only one.
//
// Once the cluster decommissioned the node, the connection closes for good
// and stays unset: every call would be refused, and the workers waiting
// for a connection ask no more.
type workerConnection struct {
	membership   event.Watchable[*Membership]
	credentials  event.Watchable[*identity.Node]
	localCurator event.Watchable[netip.AddrPort]
	// curators are the cluster's curators (clusterwatch); nothing until
	// the cluster was heard.
	curators event.Watchable[[]string]
	// directoryPort is the curators' port on the directory's hosts.
	directoryPort int
	// decommissioned is set once a curator refused the node as
	// decommissioned (rolefetch).
	decommissioned event.Watchable[bool]

	curator event.Value[*curatorConn]
}

func (w *workerConnection) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	creds, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	gone, err := event.Get(ctx, w.decommissioned)
	if err != nil {
		return fmt.Errorf("when reading whether the node was decommissioned: %w", err)
	}
	if gone {
		supervisor.Logger(ctx).Infof("The cluster decommissioned this node: no connection to its curators")
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
	r := resolver.New(creds, resolver.DirectoryEndpoints(m.ClusterDirectory, w.directoryPort))
	if err := supervisor.Run(ctx, "resolver", r.Run); err != nil {
		return fmt.Errorf("when starting resolver: %w", err)
	}
	conn, err := r.Dial()
	if err != nil {
		return fmt.Errorf("when dialling the curator: %w", err)
	}
	defer conn.Close()
	w.curator.Set(&curatorConn{conn: conn, resolver: r})
	// Unset before the deferred Close, so that nobody picks up a
	// closed connection while this worker restarts.
	defer w.curator.Set(nil)
	supervisor.Signal(ctx, supervisor.SignalHealthy)

	localC := make(chan netip.AddrPort)
	curatorsC := make(chan []string)
	goneC := make(chan bool)
	event.Pipe(ctx, w.localCurator, localC)
	event.Pipe(ctx, w.curators, curatorsC)
	event.Pipe(ctx, w.decommissioned, goneC, event.Filter(func(gone bool) bool { return gone }))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-goneC:
			// Run again, to close the connection and stop the
			// resolver, and stay closed.
			return errInputChanged
		case ap := <-localC:
			local := ""
			if ap.IsValid() {
				local = ap.String()
			}
			r.SetLocal(local)
		case eps := <-curatorsC:
			r.SetCurators(eps)
		}
	}
}
