package main

import (
	"context"
	"fmt"
	"net/netip"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/network"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// networkRunnable is the network child: the network service, configured
// by the node parameters on the ESP once mounted says it is there (DHCP
// without them, or without storage at all), with the default hostname,
// and a watcher that puts every change of the external address on the
// consoles.
func networkRunnable(st *localstorage.Storage, mounted event.Value[bool], address event.Value[netip.Prefix], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		var nc *api.NetworkConfig
		if st != nil {
			if err := waitMounted(ctx, mounted); err != nil {
				return err
			}
			nc = networkConfig(st)
		}
		svc := network.New(network.Config{ExternalAddress: address, NetworkConfig: nc})
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
func watchAddress(address event.Value[netip.Prefix], printf func(string, ...any)) supervisor.Runnable {
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
