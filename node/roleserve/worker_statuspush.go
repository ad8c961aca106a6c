package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerStatuspush tells the curator what this node reports about itself
// (its address, its version and its curator, if it runs one) every time
// that changes.
type workerStatuspush struct {
	address      event.Watchable[netip.Prefix]
	credentials  event.Watchable[*identity.Node]
	curator      event.Watchable[*curatorConn]
	localCurator event.Watchable[netip.AddrPort]
	version      string
}

func (w *workerStatuspush) run(ctx context.Context) error {
	creds, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrC := make(chan netip.Prefix)
	localC := make(chan netip.AddrPort)
	event.Pipe(pctx, w.address, addrC)
	event.Pipe(pctx, w.localCurator, localC)

	var (
		addr    netip.Prefix
		local   netip.AddrPort
		healthy bool
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case addr = <-addrC:
		case local = <-localC:
		}
		if !addr.IsValid() {
			continue
		}
		st := &api.NodeStatus{
			ExternalAddress:    addr.Addr().String(),
			Version:            w.version,
			TimestampUnixNanos: time.Now().UnixNano(),
		}
		if local.IsValid() {
			st.RunningCurator = &api.NodeStatus_RunningCurator{Port: int32(local.Port())}
		}
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cc.client().UpdateNodeStatus(cctx, &api.UpdateNodeStatusRequest{NodeId: creds.ID(), Status: st})
		ccancel()
		if err != nil {
			return fmt.Errorf("when updating the node's status: %w", err)
		}
		if !healthy {
			supervisor.Logger(ctx).Infof("Status pushed (address %s, curator %v)", st.ExternalAddress, local.IsValid())
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
}
