package roleserve

import (
	"context"
	"net/netip"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/pkg/event"
	api "cairn.dev/cairn/proto/api"
)

// nodeInputs are the values from which the controlplane and the Kubernetes
// workers build what they run: the node's roles, its address and, for
// those that use it, its voting etcd member.
type nodeInputs struct {
	roles   event.Watchable[*api.NodeRoles]
	address event.Watchable[netip.Prefix]
	// localEtcd is nil for a worker that does not use the etcd member.
	localEtcd event.Watchable[*consensus.Status]
}

// nodeState is the latest of each of nodeInputs.
type nodeState struct {
	roles *api.NodeRoles
	ip    netip.Addr
	// etcd is nil while the node has no voting etcd member, and always
	// when nodeInputs has no localEtcd.
	etcd *consensus.Status
}

// runFor is the scaffolding of a worker that restarts on a change (see the
// package documentation). Once the node's roles and address are known, it
// calls start with their state, which starts the worker's subtree; then it
// calls fits with the state start was given and each later one, and
// returns the first error fits returns (errInputChanged, when the subtree
// no longer fits the node). It returns start's error, or ctx's once ctx
// is done.
func (in nodeInputs) runFor(ctx context.Context, start func(nodeState) error, fits func(started, now nodeState) error) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rolesC := make(chan *api.NodeRoles)
	addrC := make(chan netip.Prefix)
	etcdC := make(chan *consensus.Status)
	event.Pipe(pctx, in.roles, rolesC, event.NotNil[*api.NodeRoles]())
	event.Pipe(pctx, in.address, addrC)
	if in.localEtcd != nil {
		event.Pipe(pctx, in.localEtcd, etcdC)
	}
	var (
		roles   *api.NodeRoles
		addr    netip.Prefix
		etcd    *consensus.Status
		started *nodeState
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case roles = <-rolesC:
		case addr = <-addrC:
		case etcd = <-etcdC:
		}
		if roles == nil || !addr.IsValid() {
			continue
		}
		now := nodeState{roles: roles, ip: addr.Addr(), etcd: etcd}
		if started != nil {
			if err := fits(*started, now); err != nil {
				return err
			}
			continue
		}
		if err := start(now); err != nil {
			return err
		}
		started = &now
	}
}
