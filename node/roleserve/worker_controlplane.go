package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// controlplaneInputs is what the controlplane's subtree is built from: it
// runs again when they change.
type controlplaneInputs struct {
	// member is whether the node holds the ConsensusMember role.
	member bool
	// ip is the node's IP, where etcd's peers and the curator listen.
	ip netip.Addr
}

func (i controlplaneInputs) String() string {
	if !i.member {
		return "not a consensus member, on " + i.ip.String()
	}
	return "consensus member on " + i.ip.String()
}

// runControlplane runs etcd and the curator while the node holds the
// ConsensusMember role (member), and cleans up after them when it does not
// (standby). It returns errInputChanged when the role or, for a member, the
// node's IP changes.
func (s *Service) runControlplane(ctx context.Context) error {
	m, err := s.membership(ctx)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rolesC := make(chan *api.NodeRoles)
	addrC := make(chan netip.Prefix)
	event.Pipe(pctx, &s.roles, rolesC, event.Filter(notNil[api.NodeRoles]))
	event.Pipe(pctx, s.cfg.ExternalAddress, addrC)

	var (
		roles   *api.NodeRoles
		addr    netip.Prefix
		started *controlplaneInputs
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case roles = <-rolesC:
		case addr = <-addrC:
		}
		if roles == nil || !addr.IsValid() {
			continue
		}
		in := controlplaneInputs{member: roles.GetConsensusMember() != nil, ip: addr.Addr()}
		if started != nil {
			if in != *started {
				return fmt.Errorf("%w: now %s", errInputChanged, in)
			}
			continue
		}
		if in.member {
			err = supervisor.Run(ctx, "member", s.runMember(m, in.ip))
		} else {
			err = supervisor.Run(ctx, "standby", s.runStandby(m, in.ip))
		}
		if err != nil {
			return fmt.Errorf("when starting: %w", err)
		}
		started = &in
		supervisor.Signal(ctx, supervisor.SignalHealthy)
	}
}

// runStandby runs while the node is no consensus member. A node that still
// has etcd data was a member until its role went: it keeps its etcd member
// running until the curator has removed it from the cluster (stopping it
// first could cost the cluster its quorum, and with it the removal), then
// wipes the data.
func (s *Service) runStandby(m *Membership, ip netip.Addr) supervisor.Runnable {
	return func(ctx context.Context) error {
		lg := supervisor.Logger(ctx)
		dir := s.etcdDir()
		if hasEtcdData(dir) {
			lg.Info("roleserve: role removed, waiting for the curator to remove this etcd member")
			var left memory.Value[bool]
			svc := consensus.New(s.consensusConfig(m, ip))
			if err := supervisor.Run(ctx, "consensus", s.runConsensus(svc, &left)); err != nil {
				return fmt.Errorf("when starting consensus: %w", err)
			}
			if _, err := get[bool](ctx, &left, func(b bool) bool { return b }); err != nil {
				return fmt.Errorf("when waiting for the removal: %w", err)
			}
			s.ranConsensus.Store(true)
		} else if err := wipe(dir); err != nil {
			return err
		}
		if s.ranConsensus.Swap(false) {
			lg.Info("roleserve: consensus stopped: role removed")
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
}

// hasEtcdData tells whether etcd has run on dir (its write-ahead log
// exists). A member without it must join the cluster anew.
func hasEtcdData(dir string) bool {
	return dirHasEntries(filepath.Join(dir, "etcd", "member", "wal"))
}

func dirHasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// wipe empties dir, leaving it in place.
func wipe(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("when wiping %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("when wiping %s: %w", dir, err)
		}
	}
	return nil
}
