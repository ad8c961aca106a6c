package curator

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/supervisor"
)

// Port is the TCP port on which every curator serves, on the node's IP.
const Port = 7833

// DefaultHeartbeatInterval is how often nodes are asked to beat.
const DefaultHeartbeatInterval = 5 * time.Second

// Config is what a curator needs.
type Config struct {
	// Node is this node's identity: the curator serves with it and dials
	// the leader with it.
	Node *identity.Node
	// Consensus is the local etcd member's Status, running and voting.
	Consensus *consensus.Status
	// Advertise is where other nodes reach this curator (node IP and
	// Port). The election names the leader by it.
	Advertise netip.AddrPort
	// Listener, when set, is where the curator serves; nil listens on
	// ":7833".
	Listener net.Listener
}

// Option changes an optional setting of a Service.
type Option func(*options)

type options struct {
	heartbeatInterval time.Duration
}

// WithHeartbeatInterval sets the interval at which the leader asks nodes
// to beat (HeartbeatResponse). The default is DefaultHeartbeatInterval.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(o *options) { o.heartbeatInterval = d }
}

// Service is one curator: it serves AAA, Management and Curator, takes
// part in the election and forwards calls to the leader while it follows.
type Service struct {
	cfg  Config
	opts options
}

// New returns a curator for cfg. Nothing happens until Run.
func New(cfg Config, opts ...Option) *Service {
	o := options{heartbeatInterval: DefaultHeartbeatInterval}
	for _, opt := range opts {
		opt(&o)
	}
	return &Service{cfg: cfg, opts: o}
}

// Run serves the curator until ctx ends. It is a supervisor runnable.
func (s *Service) Run(ctx context.Context) error {
	srv := rpc.NewServer(s.cfg.Node)
	lis := s.cfg.Listener
	if lis == nil {
		var err error
		lis, err = net.Listen("tcp", fmt.Sprintf(":%d", Port))
		if err != nil {
			return fmt.Errorf("when listening on port %d: %w", Port, err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return srv.Serve(ctx, lis)
}
