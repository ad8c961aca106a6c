// Package nodemanagement serves NodeManagement, the API every node offers its
// owner about itself (on ports.NodeManagement): its logs, rebooting or
// powering off the machine, and rebuilding a cluster that lost its quorum
// from a backup. It works on the node that was dialled; nothing is
// forwarded.
//
//	cairnctl logs -f ──Logs──▶ Service ──Read(dn, backlog, stream)──▶ LogTree
//	                  ◀── LogsResponse batches: backlog, then new entries
//
//	cairnctl node reboot ──Reboot──▶ Service ──reply──▶ caller
//	                                   └─ reply sent (answerGrace) ─▶ Config.Reboot()
//
// Recover (recover.go) hands the node's etcd member a backup to rebuild the
// cluster from, then reboots the node the same way. Update (update.go)
// installs a signed release into the system slot the node does not run,
// through node/update, and streams its progress. GetResources
// (resources.go) and GetProfile (profile.go) say what the node's
// processes take, and where the core's time goes.
//
// Logs never slows the node's loggers down: it reads through a
// logtree.LogReader, whose stream drops entries (and says so in a WARNING
// entry) for a caller that reads too slowly. Reboot and Poweroff answer
// first and act a moment later, so that the reply leaves the node before it
// goes down; only the first of them acts, later ones are refused.
package nodemanagement

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// Reboot, Poweroff and Recover act only once their reply has left: gRPC
// ends a call's context when it queues the call's status behind the
// reply, and the connection's writer sends both moments later, which
// answerGrace covers. A call whose context has not ended after
// actionDelay (it ends once the handler returns) is acted on then.
const (
	answerGrace = 250 * time.Millisecond
	actionDelay = time.Second
)

// logDN is where the service logs what it was asked to do.
const logDN logtree.DN = "root.nodemanagement"

// Config is what a Service works with.
type Config struct {
	// LogTree is the node's log tree, which Logs reads. Without it Logs
	// answers Unavailable.
	LogTree *logtree.LogTree
	// Metrics gathers the node's metrics, which GetMetrics returns. Nil:
	// GetMetrics answers Unavailable.
	Metrics prometheus.Gatherer
	// LogStore keeps the past boots' logs, which Logs reads for a past
	// boot. Nil: past boots are not kept.
	LogStore *logstore.Store
	// Reboot reboots the machine (after shutting its services down). It is
	// called once, from a timer, shortly after the reply to Reboot is sent.
	// Without it Reboot answers Unimplemented.
	Reboot func()
	// RebootFirmware reboots the machine through its firmware, as Reboot
	// does otherwise. Without it a Reboot that asks for the firmware
	// answers Unimplemented.
	RebootFirmware func()
	// Poweroff powers the machine off (after shutting its services down).
	// It is called once, from a timer, shortly after the reply to Poweroff
	// is sent. Without it Poweroff answers Unimplemented.
	Poweroff func()
	// EtcdDataDir is the data directory of the node's etcd member
	// (consensus.Config.DataDir), where Recover stages a backup. Without
	// it, or without Reboot, Recover answers Unimplemented.
	EtcdDataDir string
	// ClusterCA is the certificate (DER) of the cluster CA that issued the
	// node's identity: Recover refuses a backup of a cluster of another CA.
	ClusterCA []byte
	// Installer installs releases into the system slot the node does not
	// run (Update), and says what the slots hold (GetSystemSlots).
	// Without it both answer Unimplemented.
	Installer *update.Installer
}

// Service implements api.NodeManagementServer. Register it on the node's
// rpc.Server with api.RegisterNodeManagementServer.
type Service struct {
	api.UnimplementedNodeManagementServer

	cfg Config
	// grace and delay are answerGrace and actionDelay, other in tests.
	grace, delay time.Duration

	mu sync.Mutex
	// going is what the node is going down for ("reboot", "poweroff"),
	// empty until Reboot, Poweroff or Recover succeeded once.
	going string

	// receiving is set while Recover receives a backup.
	receiving atomic.Bool
}

// New returns a Service working with cfg.
func New(cfg Config) *Service {
	return &Service{cfg: cfg, grace: answerGrace, delay: actionDelay}
}

// Reboot answers, then calls Config.Reboot (Config.RebootFirmware when the
// request asks for the firmware) once the answer is sent.
func (s *Service) Reboot(ctx context.Context, req *api.RebootRequest) (*api.RebootResponse, error) {
	what, reboot := "reboot", s.cfg.Reboot
	if req.GetFirmware() {
		what, reboot = "reboot through the firmware", s.cfg.RebootFirmware
	}
	if err := s.schedule(ctx, what, reboot); err != nil {
		return nil, err
	}
	return &api.RebootResponse{}, nil
}

// Poweroff answers, then calls Config.Poweroff once the answer is sent.
func (s *Service) Poweroff(ctx context.Context, _ *api.PoweroffRequest) (*api.PoweroffResponse, error) {
	if err := s.schedule(ctx, "poweroff", s.cfg.Poweroff); err != nil {
		return nil, err
	}
	return &api.PoweroffResponse{}, nil
}

// goingDown is what the node is going down for, "" while it is not.
func (s *Service) goingDown() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.going
}

// schedule arranges for action to be called once, s.grace after the call
// of ctx ended (its answer sent) or after s.delay, whichever comes first,
// unless the node is already going down. It returns the gRPC status to
// answer with.
func (s *Service) schedule(ctx context.Context, what string, action func()) error {
	if action == nil {
		return status.Errorf(codes.Unimplemented, "this node cannot %s", what)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.going != "" {
		return status.Errorf(codes.FailedPrecondition, "the node is already going down for %s", s.going)
	}
	s.going = what
	s.logger().Warningf("%s requested by the owner, once the answer is sent", what)
	var once sync.Once
	act := func() { once.Do(action) }
	grace := s.grace
	context.AfterFunc(ctx, func() { time.AfterFunc(grace, act) })
	time.AfterFunc(s.delay, act)
	return nil
}

// logger is where the service logs: the node's log tree, or nowhere.
func (s *Service) logger() logtree.LeveledLogger {
	if s.cfg.LogTree == nil {
		return logtree.New().LeveledFor(logDN)
	}
	return s.cfg.LogTree.LeveledFor(logDN)
}
