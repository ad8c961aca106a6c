package main

import (
	"context"
	"fmt"
	"net/netip"

	"cairn.dev/cairn/node/network"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// networkRunnable is the network child: the network service, with DHCP
// until node parameters and enrolment say otherwise and the default
// hostname until the node has an ID, and a watcher that puts every change
// of the external address on the consoles.
func networkRunnable(address event.Value[netip.Prefix], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		svc := network.New(network.Config{ExternalAddress: address})
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
