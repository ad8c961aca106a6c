package curator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// DefaultHeartbeatInterval is how often nodes are asked to beat.
const DefaultHeartbeatInterval = 5 * time.Second

// DefaultElectionTTL is the lifetime of a curator's election lease: how
// long a curator whose machine died keeps leading. Its session renews the
// lease every third of it, so a curator whose renewals stall for two
// thirds of it (a loaded machine, a lossy network) loses the lead to
// another. make bench-failover measures both sides of that trade. It was
// 10 s after the end-to-end suites lost their leader for a minute at 3 s;
// that outage had another cause (a test that loaded the members with
// kubelets, since mended). At 5 s the HA suite, beside a busy process,
// lost no lease and failed over in 7.7 s; at 4 s make bench-failover saw
// no lease lost in ten minutes beside two busy processes, and a failover
// in 6.4 s.
const DefaultElectionTTL = 4 * time.Second

// Config is what a curator needs.
type Config struct {
	// Node is this node's identity: the curator serves with it and dials
	// the leader with it.
	Node *identity.Node
	// Consensus is the local etcd member's Status, running and voting.
	Consensus *consensus.Status
	// Advertise is where other nodes reach this curator (node IP and
	// ports.Curator). The election names the leader by it.
	Advertise netip.AddrPort
	// Listener, when set, is where the curator serves; nil listens on
	// the Curator port of WithPorts. Serving closes it when Run returns; a
	// Run restarted by its supervisor listens anew on the same address.
	Listener net.Listener
}

// Option changes an optional setting of a Service.
type Option func(*options)

type options struct {
	heartbeatInterval time.Duration
	// electionTTL is the election lease's TTL, in whole seconds as etcd
	// takes it.
	electionTTL int
	// ports are the node's ports, defaults filled in by New.
	ports ports.Table
	// peerPort gives the etcd peer port of a node joining through
	// JoinConsensus: ports.EtcdPeer unless a test, whose members share
	// 127.0.0.1 on ports of their own, says otherwise.
	peerPort func(nodeID string) int
	// limits bound what callers may ask (limits.go).
	limits limits
	// nodeLifetime and ownerLifetime are the lifetimes of the node and
	// owner certificates this curator issues.
	nodeLifetime, ownerLifetime time.Duration
	// kubernetesLifetime and kubernetesOwnerLifetime are the lifetimes of
	// the Kubernetes certificates of nodes' components and of the owner
	// (impl_kubernetes.go).
	kubernetesLifetime, kubernetesOwnerLifetime time.Duration
	// clock says whether this node's clock is known wrong; the curator
	// issues no certificate while it is.
	clock *timesync.Clock
	// rolloutInterval is how often the leader looks at a running
	// rollout (rollout.go).
	rolloutInterval time.Duration
	// drainer replaces, in tests, the Kubernetes API client that drains
	// workers in a rollout.
	drainer drainer
}

// WithClock makes the curator ask clock, before it issues a certificate,
// whether the node's clock is known wrong (node/timesync). Without it the
// curator checks the time against timesync.Floor only.
func WithClock(clock *timesync.Clock) Option {
	return func(o *options) { o.clock = clock }
}

// WithCertificateLifetimes sets the lifetimes of the node and owner
// certificates the curator issues; zero keeps the default
// (DefaultNodeCertificateLifetime, DefaultOwnerCertificateLifetime).
// Tests shorten them to see renewal happen.
func WithCertificateLifetimes(node, owner time.Duration) Option {
	return func(o *options) {
		if node > 0 {
			o.nodeLifetime = node
		}
		if owner > 0 {
			o.ownerLifetime = owner
		}
	}
}

// WithHeartbeatInterval sets the interval at which the leader asks nodes
// to beat (HeartbeatResponse). The default is DefaultHeartbeatInterval.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(o *options) { o.heartbeatInterval = d }
}

// WithElectionTTL sets the lifetime of the curator's election lease,
// rounded up to whole seconds, at least two. The default is
// DefaultElectionTTL.
func WithElectionTTL(d time.Duration) Option {
	return func(o *options) { o.electionTTL = ttlSeconds(d) }
}

// ttlSeconds is d in whole seconds, rounded up, at least two: etcd
// refuses leases shorter than one and a half election timeouts.
func ttlSeconds(d time.Duration) int {
	return max(2, int((d+time.Second-1)/time.Second))
}

// WithPorts sets the node's ports, zero fields meaning the fixed ones
// (ports.Table.WithDefaults): the curator listens on Curator when
// Config.Listener is nil, and nodes that join the consensus through it run
// their etcd peer listener on EtcdPeer (JoinConsensus gives etcd
// https://<peer address>:<EtcdPeer>). Production passes nothing; tests
// that run several nodes on one address move the ports.
func WithPorts(t ports.Table) Option {
	return func(o *options) { o.ports = t }
}

// Service is one curator: it serves AAA, Management and Curator, takes
// part in the election and forwards calls to the leader while it follows.
type Service struct {
	cfg  Config
	opts options
	// listenerUsed is set once Config.Listener has been served on.
	listenerUsed atomic.Bool
}

// New returns a curator for cfg. Nothing happens until Run.
func New(cfg Config, opts ...Option) *Service {
	o := options{
		heartbeatInterval: DefaultHeartbeatInterval,
		electionTTL:       ttlSeconds(DefaultElectionTTL),
		limits:            defaultLimits(),
		nodeLifetime:      DefaultNodeCertificateLifetime,
		ownerLifetime:     DefaultOwnerCertificateLifetime,

		kubernetesLifetime:      DefaultKubernetesCertificateLifetime,
		kubernetesOwnerLifetime: DefaultKubernetesOwnerLifetime,
		rolloutInterval:         DefaultRolloutInterval,
	}
	for _, opt := range opts {
		opt(&o)
	}
	o.ports = o.ports.WithDefaults()
	if o.clock == nil {
		o.clock = timesync.NewClock(nil)
	}
	if o.peerPort == nil {
		peer := o.ports.EtcdPeer
		o.peerPort = func(string) int { return peer }
	}
	return &Service{cfg: cfg, opts: o}
}

// curator is the state of one run of a Service.
type curator struct {
	cfg  Config
	opts options
	// root reaches etcd's whole key space (for the PKI), etcd the
	// curator's namespace.
	root, etcd *consensus.Client
	// ca is the cluster CA, kept for the run so that its certificate and
	// key are read from etcd once, not on every certificate issued.
	ca *pki.Certificate
	// kubeCA is the Kubernetes CA and frontProxyCA the aggregation
	// layer's, kept likewise.
	kubeCA, frontProxyCA *pki.Certificate
	// nodeCredentials dial the leader.
	nodeCredentials credentials.TransportCredentials

	// log is the curator's logger, for work that outlives a call.
	log logtree.LeveledLogger

	heartbeats heartbeats
	// honours are the records the leader read UP, for heartbeats.
	honours honours
	// quotas are what callers used of opts.limits in this run.
	quotas *quotas
	// registering holds a token for each RegisterNode between its count
	// of the nodes in NEW and its write (limits.go).
	registering chan struct{}
	// leaders publishes who leads, for GetCurrentLeader.
	leaders memory.Value[leader]
	// drain is the rollout's client of an apiserver (rollout.go).
	drain drainClient
	// unstaged is the last ended rollout whose releases to stage this
	// leader took from the nodes (unstage); only the rollout runnable
	// uses it.
	unstaged string
	// ownerTrust follows the owner trust in etcd (state_owner.go), by which
	// this curator judges owner callers and which WatchOwnerTrust streams.
	ownerTrust event.Watchable[*api.OwnerTrust]

	// mu guards current and conn: who leads and, when another curator
	// does, the connection to it.
	mu      sync.Mutex
	current leader
	conn    *grpc.ClientConn
}

// Run serves the curator until ctx ends. It is a supervisor runnable: it
// takes part in the election (a child runnable) and serves AAA,
// Management and Curator, leading or forwarding to the leader.
func (s *Service) Run(ctx context.Context) error {
	// Listening comes first, and the listener is closed however Run ends
	// (Serve closes it too), so that a Run that fails before it serves
	// leaves the port free for the next one.
	lis, err := s.listen()
	if err != nil {
		return err
	}
	defer lis.Close()
	if s.cfg.Consensus == nil || !s.cfg.Consensus.Running {
		return errors.New("consensus is not running")
	}
	root := s.cfg.Consensus.Client()
	etcd, err := curatorClient(root)
	if err != nil {
		return err
	}
	defer etcd.Close()
	c := &curator{
		cfg:             s.cfg,
		opts:            s.opts,
		root:            root,
		etcd:            etcd,
		ca:              consensus.ClusterCA(),
		kubeCA:          kubernetesCA(),
		frontProxyCA:    frontProxyCA(),
		nodeCredentials: rpc.NodeCredentials(s.cfg.Node),
		log:             supervisor.Logger(ctx),
		registering:     make(chan struct{}, registerInFlight),
		quotas:          newQuotas(s.opts.limits),
		ownerTrust:      newOwnerTrustValue(etcd),
	}
	c.leaders.Set(leader{})
	defer c.closeConn()

	srv := rpc.NewServer(s.cfg.Node,
		grpc.ChainUnaryInterceptor(c.unaryInterceptor),
		grpc.ChainStreamInterceptor(c.streamInterceptor),
	)
	srv.TrustForwarders(c.trustForwarder)
	srv.JudgeOwners(c.ownerTrust)
	api.RegisterAAAServer(srv, aaa{curator: c})
	api.RegisterManagementServer(srv, management{curator: c})
	api.RegisterCuratorServer(srv, nodeAPI{curator: c})

	// Before anyone can read the records of a restored cluster.
	if err := c.finishRestore(ctx); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "election", c.runElection); err != nil {
		return fmt.Errorf("when starting the election: %w", err)
	}
	// The owner trust of a new cluster, before the first owner call if
	// etcd answers soon; the child runnable keeps trying if it does not.
	ictx, cancel := context.WithTimeout(ctx, ownerTrustWait)
	if err := c.createOwnerTrust(ictx); err != nil {
		c.log.Warningf("Owner trust not there yet (owner calls wait for it): %v", err)
	}
	cancel()
	if err := supervisor.Run(ctx, "ownertrust", c.ensureOwnerTrust); err != nil {
		return fmt.Errorf("when starting ownertrust: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return srv.Serve(ctx, lis)
}

// listen returns the listener to serve on: Config.Listener on the first
// run, and a new one on its address after a restart (the run before closed
// the first), or one on the Curator port.
func (s *Service) listen() (net.Listener, error) {
	if s.cfg.Listener != nil && !s.listenerUsed.Swap(true) {
		return s.cfg.Listener, nil
	}
	addr := fmt.Sprintf(":%d", s.opts.ports.Curator)
	if s.cfg.Listener != nil {
		addr = s.cfg.Listener.Addr().String()
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("when listening on %s: %w", addr, err)
	}
	return lis, nil
}

// closeConn closes the connection to the leader, if any.
func (c *curator) closeConn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}
