package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
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

// workerControlplane runs etcd and the curator while the node holds the
// ConsensusMember role or still has etcd data (member), and cleans up
// otherwise (standby). On the boot that creates the cluster it bootstraps
// etcd and writes the cluster's initial state.
type workerControlplane struct {
	membership  event.Watchable[*Membership]
	address     event.Watchable[netip.Prefix]
	roles       event.Watchable[*api.NodeRoles]
	credentials event.Watchable[*identity.Node]
	curator     event.Watchable[*curatorConn]
	paths       nodePaths
	// ports are this node's: etcd's peer port and the curator's.
	ports ports.Table
	// joinPeerPort is the etcd peer port this node's curator gives nodes
	// that join the consensus.
	joinPeerPort int
	// afterBootstrap is Config.afterBootstrap (tests).
	afterBootstrap func(ctx context.Context, etcd *consensus.Client) error
	// curatorOptions is Config.curatorOptions (tests).
	curatorOptions []curator.Option
	// clock is Config.Clock: the curator issues no certificate while it
	// is known wrong. Nil checks the time against timesync.Floor only.
	clock event.Watchable[timesync.State]

	// bootstrapped is the identity the bootstrap made.
	bootstrapped event.Value[*identity.Node]
	// localCurator is where this node's curator serves, invalid while it
	// does not.
	localCurator event.Value[netip.AddrPort]
	// localEtcd is the local etcd member while the curator serves on it,
	// nil otherwise: a Kubernetes controller's apiserver uses it.
	localEtcd event.Value[*consensus.Status]
}

// run starts member or standby for the node's roles and address. It
// returns errInputChanged when the node's IP changes, and when a node in
// standby is given the role; a member handles the loss of its role
// itself, because its etcd must keep running until the curator has removed
// it (see the package documentation).
func (w *workerControlplane) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	// member is whether the subtree runs member rather than standby.
	var member bool
	start := func(s nodeState) error {
		hasData, err := consensus.HasData(w.paths.etcd)
		if err != nil {
			return err
		}
		member = isMember(s.roles) || hasData
		if member {
			err = supervisor.Run(ctx, "member", w.runMember(m, s.ip))
		} else {
			err = supervisor.Run(ctx, "standby", w.runStandby)
		}
		if err != nil {
			return fmt.Errorf("when starting: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return nil
	}
	fits := func(started, now nodeState) error {
		in := controlplaneInputs{member: isMember(now.roles), ip: now.ip}
		if in.ip != started.ip || (!member && in.member) {
			return fmt.Errorf("%w: now %s", errInputChanged, in)
		}
		return nil
	}
	return nodeInputs{roles: w.roles, address: w.address}.runFor(ctx, start, fits)
}

func isMember(r *api.NodeRoles) bool { return r.GetConsensusMember() != nil }

// runStandby runs while the node is no consensus member and has no etcd
// data: it removes what an unfinished join may have left.
func (w *workerControlplane) runStandby(ctx context.Context) error {
	if err := wipe(w.paths.etcd); err != nil {
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

func dirHasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// setAside moves the data of a removed etcd member out of dir, into a
// sibling "<dir>.removed" (replacing what an earlier removal left there),
// and leaves dir empty for a later join. The data is of no use to the
// cluster any more, but deciding that a member was removed rests on what
// its peers said; keeping the last copy means a wrong verdict never costs
// the data outright.
func setAside(dir string) (string, error) {
	aside := filepath.Clean(dir) + ".removed"
	if err := os.RemoveAll(aside); err != nil {
		return "", fmt.Errorf("when clearing %s: %w", aside, err)
	}
	if err := os.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("when setting %s aside: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("when recreating %s: %w", dir, err)
	}
	return aside, nil
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
