package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"cairn.dev/cairn/node/cluster"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// waitMounted waits until the storage child has mounted the ESP and
// /ephemeral.
func waitMounted(ctx context.Context, mounted event.Value[bool]) error {
	w := mounted.Watch()
	defer w.Close()
	_, err := w.Get(ctx, event.Filter(func(m bool) bool { return m }))
	return err
}

// enrolmentRunnable is the cluster child: once the ESP is mounted it reads
// the node parameters and runs enrolment (node/cluster), which mounts the
// data partition and hands the node's membership to the role server.
//
// The enrolment Service is built once per boot, outside the runnable: it
// remembers its keys and what it mounted, which a restart must not lose.
func enrolmentRunnable(st *localstorage.Storage, mounted event.Value[bool], address event.Value[netip.Prefix], membership event.Value[*roleserve.Membership]) supervisor.Runnable {
	svc := cluster.New(cluster.Config{
		Storage:         st,
		ExternalAddress: address,
		Membership:      membership,
		FWCfgPath:       cluster.FWCfgParametersPath,
	})
	return func(ctx context.Context) error {
		if err := waitMounted(ctx, mounted); err != nil {
			return err
		}
		if err := supervisor.Run(ctx, "enrolment", svc.Run); err != nil {
			return fmt.Errorf("when starting enrolment: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}

// networkConfig returns the operator's network configuration from the node
// parameters, or nil (DHCP) when there are none or they do not parse:
// enrolment reports bad parameters, the network comes up regardless.
func networkConfig(st *localstorage.Storage) *api.NetworkConfig {
	p, err := cluster.ReadParameters(cluster.FWCfgParametersPath, st.Root.ESP.Cairn.Parameters.FullPath())
	if err != nil || p == nil {
		return nil
	}
	return p.GetNetworkConfig()
}

// nodeManagementRunnable serves NodeManagement on its port once the node
// has its credentials. Reboot and Poweroff stop the node through request.
func nodeManagementRunnable(creds event.Value[*identity.Node], lt *logtree.LogTree, request func(action)) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := creds.Watch()
		defer w.Close()
		node, err := w.Get(ctx, event.Filter(func(n *identity.Node) bool { return n != nil }))
		if err != nil {
			return err
		}
		srv := rpc.NewServer(node)
		api.RegisterNodeManagementServer(srv, nodemanagement.New(nodemanagement.Config{
			LogTree:  lt,
			Reboot:   func() { request(reboot) },
			Poweroff: func() { request(poweroff) },
		}))
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(nodemanagement.Port))
		if err != nil {
			return fmt.Errorf("when listening for node management: %w", err)
		}
		supervisor.Logger(ctx).Infof("Node management serving on %s", lis.Addr())
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return srv.Serve(ctx, lis)
	}
}
