package roleserve

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// runMember runs the node's etcd member and, once it votes and while the
// node holds the role, the curator:
//
//	member
//	├── consensus   etcd (joins as a learner when its data directory is new)
//	│               until the curator removes the member; then wipes it
//	└── curator     Bootstrap (new cluster), then the curator while etcd
//	    │           runs and votes and the role is held; restarts when etcd
//	    └── server  does, or the role comes or goes
//
// Once etcd was removed and the role is gone, it returns errInputChanged:
// the controlplane runs again, in standby.
func (w *workerControlplane) runMember(m *Membership, ip netip.Addr) supervisor.Runnable {
	return func(ctx context.Context) error {
		cfg := w.consensusConfig(m, ip)
		hasData, err := consensus.HasData(cfg.DataDir)
		if err != nil {
			return err
		}
		if m.Bootstrap == nil && !hasData {
			// Whatever is there is from an earlier member (a removal
			// marker, or files of a join that never started).
			if err := wipe(cfg.DataDir); err != nil {
				return err
			}
			join, err := w.joinConsensus(ctx, ip)
			if err != nil {
				return err
			}
			cfg.Join = join
		}
		svc := consensus.New(cfg)
		var removed memory.Value[bool]
		if err := supervisor.Run(ctx, "consensus", w.runConsensus(svc, &removed)); err != nil {
			return fmt.Errorf("when starting consensus: %w", err)
		}
		if err := supervisor.Run(ctx, "curator", w.runCurator(m, svc, ip)); err != nil {
			return fmt.Errorf("when starting curator: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		if _, err := event.Get[bool](ctx, &removed, event.Filter(func(b bool) bool { return b })); err != nil {
			return fmt.Errorf("when running consensus: %w", err)
		}
		if _, err := event.Get(ctx, w.roles, event.NotNil[*api.NodeRoles](), event.Filter(func(r *api.NodeRoles) bool { return !isMember(r) })); err != nil {
			return fmt.Errorf("when waiting for the role to go: %w", err)
		}
		marker.Log(supervisor.Logger(ctx), marker.ConsensusStopped)
		return fmt.Errorf("%w: consensus member removed", errInputChanged)
	}
}

// consensusConfig is the configuration of the node's etcd member on ip.
func (w *workerControlplane) consensusConfig(m *Membership, ip netip.Addr) consensus.Config {
	return consensus.Config{
		Name:       identity.NodeID(m.NodeKey.Public().(ed25519.PublicKey)),
		DataDir:    w.paths.etcd,
		SocketPath: w.paths.socket,
		PeerIP:     net.IP(ip.AsSlice()),
		Ports:      w.ports,
		PrivateKey: m.NodeKey,
	}
}

// joinConsensus asks the curator to add this node's etcd member as a
// learner.
func (w *workerControlplane) joinConsensus(ctx context.Context, ip netip.Addr) (*consensus.JoinCluster, error) {
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return nil, err
	}
	supervisor.Logger(ctx).Infof("Joining consensus on %s", ip)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := cc.client().JoinConsensus(cctx, &api.JoinConsensusRequest{PeerAddress: ip.String()})
	if err != nil {
		return nil, fmt.Errorf("when joining consensus: %w", err)
	}
	return &consensus.JoinCluster{
		InitialCluster:  res.InitialCluster,
		Peers:           res.Peers,
		CACertificate:   res.CaCertificate,
		CRL:             res.Crl,
		PeerCertificate: res.PeerCertificate,
	}, nil
}

// runConsensus runs etcd. Once etcd says its member was removed from the
// cluster, it sets the data directory aside (see setAside), sets removed, and stays down until
// its parent runs again, on a change of the role.
func (w *workerControlplane) runConsensus(svc *consensus.Service, removed *memory.Value[bool]) supervisor.Runnable {
	return func(ctx context.Context) error {
		if isSet(removed) {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			supervisor.Signal(ctx, supervisor.SignalDone)
			return nil
		}
		err := svc.Run(ctx)
		if !errors.Is(err, consensus.ErrMemberRemoved) {
			return err
		}
		aside, err := setAside(w.paths.etcd)
		if err != nil {
			return err
		}
		removed.Set(true)
		supervisor.Logger(ctx).Infof("etcd member removed from the cluster, its data set aside in %s", aside)
		// Returning an error stops what etcd's runnables left behind;
		// the next run stays down.
		return err
	}
}

// isSet tells whether v holds true, without waiting.
func isSet(v *memory.Value[bool]) bool {
	b, err := event.Get(context.Background(), v, event.BacklogOnly[bool]())
	return err == nil && b
}

// runCurator waits for etcd to run, bootstraps a new cluster's state when
// the Membership asks for it, and serves the curator once the local member
// votes. It returns errInputChanged when etcd stops or restarts.
func (w *workerControlplane) runCurator(m *Membership, svc *consensus.Service, ip netip.Addr) supervisor.Runnable {
	return func(ctx context.Context) error {
		defer w.localCurator.Set(netip.AddrPort{})
		roles, err := waitFor(ctx, w.roles, "the roles")
		if err != nil {
			return err
		}
		if !isMember(roles) {
			// etcd runs only until the curator removed it.
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			if _, err := event.Get(ctx, w.roles, event.NotNil[*api.NodeRoles](), event.Filter(isMember)); err != nil {
				return fmt.Errorf("when waiting for the role: %w", err)
			}
			return fmt.Errorf("%w: role given", errInputChanged)
		}
		sw := svc.Status().Watch()
		defer sw.Close()
		st, err := sw.Get(ctx, event.Filter(func(st *consensus.Status) bool { return st != nil && st.Running }))
		if err != nil {
			return fmt.Errorf("when waiting for etcd: %w", err)
		}
		lg := supervisor.Logger(ctx)
		if m.Bootstrap != nil {
			if err := w.bootstrap(ctx, m, st.Client()); err != nil {
				return err
			}
		}
		if st.Learner {
			marker.Log(lg, marker.ConsensusRunning, "voting", "false")
			st, err = sw.Get(ctx, event.Filter(func(n *consensus.Status) bool { return n != nil && (!n.Running || !n.Learner || n.ID != st.ID) }))
			if err != nil {
				return fmt.Errorf("when waiting for promotion: %w", err)
			}
			if !st.Running {
				return fmt.Errorf("%w: etcd stopped", errInputChanged)
			}
		}
		marker.Log(lg, marker.ConsensusRunning, "voting", "true")
		creds, err := waitFor(ctx, w.credentials, "credentials")
		if err != nil {
			return err
		}
		adv := netip.AddrPortFrom(ip, uint16(w.ports.Curator))
		if err := supervisor.Run(ctx, "server", w.runCuratorServer(creds, st, adv)); err != nil {
			return fmt.Errorf("when starting the curator: %w", err)
		}
		w.localEtcd.Set(st)
		defer w.localEtcd.Set(nil)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return w.waitCuratorInputs(ctx, svc, st.ID)
	}
}

// waitCuratorInputs returns errInputChanged once etcd stops or restarts
// (svc's Status; id is the member the curator started with), or the node
// loses the role.
func (w *workerControlplane) waitCuratorInputs(ctx context.Context, svc *consensus.Service, id uint64) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rolesC := make(chan *api.NodeRoles)
	stoppedC := make(chan *consensus.Status)
	event.Pipe(pctx, w.roles, rolesC, event.NotNil[*api.NodeRoles]())
	event.Pipe(pctx, svc.Status(), stoppedC, event.Filter(func(n *consensus.Status) bool {
		return n == nil || !n.Running || n.ID != id
	}))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stoppedC:
			return fmt.Errorf("%w: etcd stopped", errInputChanged)
		case r := <-rolesC:
			if !isMember(r) {
				supervisor.Logger(ctx).Info("Curator stopped: role removed")
				return fmt.Errorf("%w: role removed", errInputChanged)
			}
		}
	}
}

// runCuratorServer serves the curator on adv.
func (w *workerControlplane) runCuratorServer(creds *identity.Node, st *consensus.Status, adv netip.AddrPort) supervisor.Runnable {
	return func(ctx context.Context) error {
		lis, err := net.Listen("tcp", adv.String())
		if err != nil {
			return fmt.Errorf("when listening: %w", err)
		}
		joinPorts := ports.Table{EtcdPeer: w.joinPeerPort}
		opts := append([]curator.Option{curator.WithPorts(joinPorts), curator.WithClock(timesync.NewClock(w.clock))}, w.curatorOptions...)
		cur := curator.New(curator.Config{Node: creds, Consensus: st, Advertise: adv, Listener: lis}, opts...)
		marker.Log(supervisor.Logger(ctx), marker.CuratorServing, "addr", adv.String())
		w.localCurator.Set(adv)
		return cur.Run(ctx)
	}
}

// bootstrap writes a new cluster's state into the etcd that runs for the
// first time, and publishes the node's credentials; a restart runs it
// again, which changes nothing that is written already.
func (w *workerControlplane) bootstrap(ctx context.Context, m *Membership, etcd *consensus.Client) error {
	creds, err := bootstrapCluster(ctx, supervisor.Logger(ctx), etcd, m.NodeKey, m.Bootstrap)
	if err != nil {
		return fmt.Errorf("when bootstrapping the cluster: %w", err)
	}
	if w.afterBootstrap != nil {
		if err := w.afterBootstrap(ctx, etcd); err != nil {
			return fmt.Errorf("after bootstrapping the cluster: %w", err)
		}
	}
	w.bootstrapped.Set(creds)
	return nil
}
