package main

import (
	"context"
	"fmt"
	"net/netip"

	"cairn.dev/cairn/node/network"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// networkRunnable is the network child: the network service, configured
// by the node parameters once they are read (DHCP without them, or with
// params nil, on a node without storage), with the default hostname, and
// a watcher that puts every change of the external address on the
// consoles. The service publishes the NTP servers of its lease on ntp.
func networkRunnable(params event.Watchable[*parameters.Loaded], address event.Value[netip.Prefix], ntp event.Value[[]netip.Addr], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		var nc *api.NetworkConfig
		if params != nil {
			w := params.Watch()
			l, err := w.Get(ctx, event.NotNil[*parameters.Loaded]())
			w.Close()
			if err != nil {
				return fmt.Errorf("when waiting for node parameters: %w", err)
			}
			nc = l.NetworkConfig()
		}
		svc := network.New(network.Config{ExternalAddress: address, NTPServers: ntp, NetworkConfig: nc})
		if err := supervisor.Run(ctx, "service", svc.Run); err != nil {
			return fmt.Errorf("when starting the network service: %w", err)
		}
		if err := supervisor.Run(ctx, "address", watchAddress(address, printf)); err != nil {
			return fmt.Errorf("when starting the address watcher: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}

// watchAddress prints a phase line for every change of address.
func watchAddress(address event.Watchable[netip.Prefix], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := address.Watch()
		defer w.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		var last netip.Prefix
		for {
			p, err := w.Get(ctx)
			if err != nil {
				return err
			}
			if p == last {
				continue
			}
			last = p
			if p.IsValid() {
				printf("network address %s", p)
			} else {
				printf("network address lost")
			}
		}
	}
}
