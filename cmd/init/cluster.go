package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/cluster"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/marker"
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
	_, err := event.Get(ctx, mounted, event.Filter(func(m bool) bool { return m }))
	return err
}

// parametersRunnable reads the node parameters once the ESP is mounted,
// once per boot, and publishes what it found for the network and
// enrolment. A node that found none that enrol it (none at all, or a
// network configuration alone) and belongs to no cluster looks for them
// on its other disks (parameters.Disks), at once and then every second,
// until one holds parameters it can use: an operator may attach the disk
// after the node booted. The network has by then started from what the
// first look found, so parameters found later with another network
// configuration are refused, with the reason, rather than half applied.
func parametersRunnable(st *localstorage.Storage, mounted event.Watchable[bool], out event.Value[*parameters.Loaded], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		log := supervisor.Logger(ctx)
		if err := waitMounted(ctx, mounted); err != nil {
			return err
		}
		l := parameters.Load(parameters.FWCfgPath, st.Root.ESP.Cairn.Parameters.FullPath())
		disks, err := parameterDisks(st, l, log.Infof)
		if err != nil {
			log.Errorf("Not looking for a parameters disk: %v", err)
		}
		if disks == nil {
			out.Set(l)
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		}
		found, src := disks.Scan()
		if found == nil {
			found = l
		} else {
			// Present at boot: these are the boot's parameters, network
			// configuration included.
			l = found
			marker.Log(log, marker.ParametersFound, "source", src)
		}
		out.Set(found)
		if found.Err == nil && found.Parameters.GetCluster() != nil {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		}
		marker.Log(log, marker.WaitingForParameters)
		printf("no node parameters: waiting for a disk that holds %s", parameters.DiskFile)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			found, src := disks.Scan()
			switch {
			case found == nil:
				continue
			case found.Err == nil && found.Parameters.GetCluster() == nil:
				log.Warningf("Parameters disk %s holds no enrolment (cluster_bootstrap or cluster_register): passed over", src)
				continue
			case found.Err == nil && !proto.Equal(found.Parameters.GetNetworkConfig(), l.NetworkConfig()):
				found = &parameters.Loaded{Err: fmt.Errorf("parameters disk %s holds another network configuration than the node booted with, and a node reads it only at boot: boot the node with the disk attached", src)}
			}
			marker.Log(log, marker.ParametersFound, "source", src)
			printf("node parameters found on %s", src)
			out.Set(found)
			if found.Err == nil {
				supervisor.Signal(ctx, supervisor.SignalDone)
				return nil
			}
		}
	}
}

// parameterDisks returns what looks for a parameters disk, or nil when
// the node has no reason to: parameters that enrol it were read at boot
// (or ones that cannot be used, which enrolment reports), or it belongs
// to a cluster (a sealed configuration, or one it cannot tell).
func parameterDisks(st *localstorage.Storage, l *parameters.Loaded, logf func(string, ...any)) (*parameters.Disks, error) {
	if l.Parameters.GetCluster() != nil || l.Err != nil {
		return nil, nil
	}
	if sealed, err := st.Root.ESP.Cairn.SealedConfiguration.Exists(); err != nil || sealed {
		return nil, nil
	}
	boot, err := st.BootDisk()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(st.Root.Ephemeral.FullPath(), "parameters-disk")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("when making the mount point %s: %w", dir, err)
	}
	return &parameters.Disks{
		SysBlock: "/sys/class/block",
		Dev:      "/dev",
		BootDisk: boot,
		Mount:    parameters.MountFAT,
		Unmount:  parameters.Unmount,
		Dir:      dir,
		Logf:     logf,
	}, nil
}

// enrolmentRunnable is the cluster child: once the ESP is mounted
// (mounted) it runs enrolment (node/cluster), which mounts the data
// partition once its modules are loaded too (dataReady) and hands the
// node's membership to the role server, rs. secureBoot, whether the
// firmware booted the node under Secure Boot, is what enrolment tells the
// curator; binding, when not nil, binds its seals to the release this boot
// came from.
//
// The enrolment Service is built once per boot, outside the runnable: it
// remembers its keys and what it mounted, which a restart must not lose.
func enrolmentRunnable(st *localstorage.Storage, mounted, dataReady event.Watchable[bool], address event.Watchable[netip.Prefix], params event.Watchable[*parameters.Loaded], membership event.Value[*roleserve.Membership], rs *roleserve.Service, secureBoot bool, binding *tpmseal.Binding) supervisor.Runnable {
	svc := cluster.New(cluster.Config{
		Storage:         st,
		ExternalAddress: address,
		Parameters:      params,
		Membership:      membership,
		Credentials:     rs.Credentials(),
		StoredDirectory: rs.StoredDirectory(),
		SecureBoot:      secureBoot,
		Binding:         binding,
		DataModules:     dataReady,
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
