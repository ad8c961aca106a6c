package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"sync/atomic"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/curator/resolver"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// Config is what the role server needs. All fields are required.
type Config struct {
	// Membership is set once by enrolment, when the node belongs to a
	// cluster and its data partition is mounted. Nothing runs before.
	Membership event.Value[*Membership]
	// ExternalAddress is the node's address on the cluster network. Its
	// IP is where etcd's peers and the curator listen, and what the node
	// reports in its status.
	ExternalAddress event.Value[netip.Prefix]
	// Storage is the node's storage: the data partition holds etcd's data
	// and the copy of the node's roles, the ESP the cluster directory.
	Storage *localstorage.Storage
	// Version is the node's software version, reported in its status.
	Version string

	// Test overrides: zero values mean the node's fixed ports.
	curatorPort   int // the local curator's port
	peerPort      int // etcd's peer port
	joinPeerPort  int // the peer port the local curator gives joining nodes
	directoryPort int // the port of the curators of the cluster directory
}

// Service is the role server. Build it with New and run Run under a
// supervisor.
type Service struct {
	cfg Config

	// credentials is the node's identity, set once known.
	credentials memory.Value[*identity.Node]
	// bootstrapped is what Membership.Bootstrap returned, set by the
	// controlplane on the boot that creates the cluster.
	bootstrapped memory.Value[*identity.Node]
	// roles is the node's roles: the local copy, then the curator's.
	roles memory.Value[*api.NodeRoles]
	// curator is the ClientConn to the curator leader; nil while there
	// is none (no credentials yet, or the connection worker restarts).
	curator memory.Value[*curatorConn]
	// localCurator is where this node's own curator serves; invalid
	// while it does not.
	localCurator memory.Value[netip.AddrPort]

	// rolesLoaded is set once rolefetch published the local copy of the
	// roles, so that its restarts do not publish it again.
	rolesLoaded atomic.Bool
}

// curatorConn is a ClientConn that follows the curator leader, and the
// resolver behind it.
type curatorConn struct {
	conn     *grpc.ClientConn
	resolver *resolver.Resolver
}

func (c *curatorConn) client() api.CuratorClient { return api.NewCuratorClient(c.conn) }

// New returns a role server for cfg. Nothing happens until Run.
func New(cfg Config) *Service {
	s := &Service{cfg: cfg}
	s.localCurator.Set(netip.AddrPort{})
	return s
}

// Credentials is the node's identity: Membership.Credentials, or what
// Membership.Bootstrap returned on the boot that created the cluster. It is
// set once, when known.
func (s *Service) Credentials() event.Value[*identity.Node] { return &s.credentials }

// Run runs every worker until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	workers := map[string]supervisor.Runnable{
		"credentials":  s.runCredentials,
		"connection":   s.runConnection,
		"rolefetch":    s.runRolefetch,
		"controlplane": s.runControlplane,
		"statuspush":   s.runStatuspush,
		"heartbeat":    s.runHeartbeat,
		"clusterdir":   s.runClusterdir,
	}
	names := make([]string, 0, len(workers))
	for n := range workers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := supervisor.Run(ctx, n, workers[n]); err != nil {
			return fmt.Errorf("when starting %s: %w", n, err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// errInputChanged is returned by a worker whose inputs changed, so that its
// supervisor runs it again on the new ones (see the package documentation).
var errInputChanged = fmt.Errorf("inputs changed: %w", supervisor.ErrRestart)

// get returns the first value of v accepted by pred.
func get[T any](ctx context.Context, v event.Value[T], pred func(T) bool) (T, error) {
	w := v.Watch()
	defer w.Close()
	return w.Get(ctx, event.Filter(pred))
}

func notNil[T any](v *T) bool { return v != nil }

// membership waits for the node's Membership.
func (s *Service) membership(ctx context.Context) (*Membership, error) {
	m, err := get(ctx, s.cfg.Membership, notNil)
	if err != nil {
		return nil, fmt.Errorf("when waiting for membership: %w", err)
	}
	return m, nil
}

// waitCredentials waits for the node's credentials.
func (s *Service) waitCredentials(ctx context.Context) (*identity.Node, error) {
	n, err := get[*identity.Node](ctx, &s.credentials, notNil)
	if err != nil {
		return nil, fmt.Errorf("when waiting for credentials: %w", err)
	}
	return n, nil
}

// waitCurator waits for a connection to the curator leader.
func (s *Service) waitCurator(ctx context.Context) (*curatorConn, error) {
	c, err := get[*curatorConn](ctx, &s.curator, notNil)
	if err != nil {
		return nil, fmt.Errorf("when waiting for a curator connection: %w", err)
	}
	return c, nil
}

// Paths of the node's storage that the role server uses.
func (s *Service) etcdDir() string { return s.cfg.Storage.Root.Data.Etcd.FullPath() }
func (s *Service) socketPath() string {
	return filepath.Join(s.cfg.Storage.Root.Ephemeral.FullPath(), "etcd", "client.sock")
}

func portOr(p, def int) int {
	if p == 0 {
		return def
	}
	return p
}
