package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// runStatuspush tells the curator what this node reports about itself
// (its address, its version and its curator, if it runs one) every time
// that changes.
func (s *Service) runStatuspush(ctx context.Context) error {
	creds, err := s.waitCredentials(ctx)
	if err != nil {
		return err
	}
	cc, err := s.waitCurator(ctx)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrC := make(chan netip.Prefix)
	localC := make(chan netip.AddrPort)
	event.Pipe(pctx, s.cfg.ExternalAddress, addrC)
	event.Pipe(pctx, &s.localCurator, localC)

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
			Version:            s.cfg.Version,
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
			supervisor.Logger(ctx).Infof("roleserve: status pushed (address %s, curator %v)", st.ExternalAddress, local.IsValid())
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
}
