package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"cairn.dev/cairn/node/cluster"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
)

// waitMounted waits until the storage child has mounted the ESP and
// /ephemeral.
func waitMounted(ctx context.Context, mounted event.Watchable[bool]) error {
	w := mounted.Watch()
	defer w.Close()
	_, err := w.Get(ctx, event.Filter(func(m bool) bool { return m }))
	return err
}

// parametersRunnable reads the node parameters once the ESP is mounted,
// once per boot, and publishes what it found for the network and
// enrolment.
func parametersRunnable(st *localstorage.Storage, mounted event.Watchable[bool], out event.Value[*parameters.Loaded]) supervisor.Runnable {
	return func(ctx context.Context) error {
		if err := waitMounted(ctx, mounted); err != nil {
			return err
		}
		out.Set(parameters.Load(parameters.FWCfgPath, st.Root.ESP.Cairn.Parameters.FullPath()))
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
}

// enrolmentRunnable is the cluster child: once the ESP is mounted and the
// data partition's modules are loaded (dataReady) it runs enrolment
// (node/cluster), which mounts the data partition and hands the node's membership to the
// role server, rs. secureBoot, whether the firmware booted the node under
// Secure Boot, is what enrolment tells the curator; binding, when not nil,
// binds its seals to the release this boot came from.
//
// The enrolment Service is built once per boot, outside the runnable: it
// remembers its keys and what it mounted, which a restart must not lose.
func enrolmentRunnable(st *localstorage.Storage, dataReady event.Watchable[bool], address event.Watchable[netip.Prefix], params event.Watchable[*parameters.Loaded], membership event.Value[*roleserve.Membership], rs *roleserve.Service, secureBoot bool, binding *tpmseal.Binding) supervisor.Runnable {
	svc := cluster.New(cluster.Config{
		Storage:         st,
		ExternalAddress: address,
		Parameters:      params,
		Membership:      membership,
		Credentials:     rs.Credentials(),
		StoredDirectory: rs.StoredDirectory(),
		SecureBoot:      secureBoot,
		Binding:         binding,
	})
	return func(ctx context.Context) error {
		if err := waitMounted(ctx, dataReady); err != nil {
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

// nodeManagementRunnable serves NodeManagement on its port once the node
// has its credentials, to the owner as owners, the owner trust, admits.
// Reboot and Poweroff stop the node through request; Recover stages
// backups in the etcd data directory of st; past boots' logs come from
// ls, metrics from g. Update installs releases into the system slot
// that booted does not name, trusting what rs's cluster configuration
// says, once the update child made the installer.
func nodeManagementRunnable(st *localstorage.Storage, rs *roleserve.Service, installers event.Watchable[*installer], lt *logtree.LogTree, ls *logstore.Store, g prometheus.Gatherer, request func(action)) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := rs.Credentials().Watch()
		defer w.Close()
		node, err := w.Get(ctx, event.NotNil[*identity.Node]())
		if err != nil {
			return err
		}
		iw := installers.Watch()
		defer iw.Close()
		inst, err := iw.Get(ctx, event.NotNil[*installer]())
		if err != nil {
			return err
		}
		srv := rpc.NewServer(node)
		srv.JudgeOwners(rs.OwnerTrust())
		api.RegisterNodeManagementServer(srv, nodemanagement.New(nodemanagement.Config{
			LogTree:        lt,
			Reboot:         func() { request(reboot) },
			RebootFirmware: func() { request(firmwareReboot) },
			Poweroff:       func() { request(poweroff) },
			LogStore:       ls,
			Metrics:        g,
			EtcdDataDir:    st.Root.Data.Etcd.FullPath(),
			ClusterCA:      node.CACertificate().Raw,
			Installer:      inst.i,
		}))
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(ports.NodeManagement))
		if err != nil {
			return fmt.Errorf("when listening for node management: %w", err)
		}
		supervisor.Logger(ctx).Infof("Node management serving on %s", lis.Addr())
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return srv.Serve(ctx, lis)
	}
}

// logStoreRunnable runs ls, which keeps the log tree on the data partition
// (node/logstore), once enrolment has mounted it, which it has when the membership is
// handed on. What was logged before that is still in the tree's memory
// and is written first.
func logStoreRunnable(ls *logstore.Store, membership event.Watchable[*roleserve.Membership]) supervisor.Runnable {
	return func(ctx context.Context) error {
		w := membership.Watch()
		defer w.Close()
		if _, err := w.Get(ctx, event.NotNil[*roleserve.Membership]()); err != nil {
			return err
		}
		return ls.Run(ctx)
	}
}
