package consensus

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/holds"
	"cairn.dev/cairn/pkg/supervisor"
)

// ErrMemberRemoved is returned by Run once this member has been removed from
// the cluster: its data is of no further use, and the runnable refuses to
// start etcd on it again. Whoever owns the data directory must wipe it and
// join anew.
var ErrMemberRemoved = errors.New("this member was removed from the cluster")

// ErrNoMember is returned (wrapped) by Status.RemoveMember when the cluster
// has no member of that name: it never joined, or was removed before. A
// caller that retries a removal may take it as done.
var ErrNoMember = errors.New("no such member")

// Config is what a consensus Service needs. All fields are required unless
// said otherwise.
type Config struct {
	// Name is this member's name in the cluster: the node ID.
	Name string
	// DataDir holds etcd's data and this member's peer TLS files. On a
	// node it lives on the encrypted data partition.
	DataDir string
	// SocketPath is the unix socket on which etcd serves its clients. It
	// is the only way to reach etcd as a client: there is no TCP client
	// listener. The path must be short enough for a unix socket (about
	// 100 bytes).
	SocketPath string
	// PeerIP is the node's IP, on which the other members reach this one.
	PeerIP net.IP
	// Ports are the node's ports: the member peers on Ports.EtcdPeer of
	// PeerIP. A zero field is the fixed port (ports.Table.WithDefaults);
	// tests that run several members on one address set EtcdPeer.
	Ports ports.Table
	// PrivateKey is the node's ed25519 key. This member's peer certificate
	// is issued for its public key, and it is written into DataDir for
	// etcd's peer TLS.
	PrivateKey ed25519.PrivateKey
	// Join, when set, makes a member whose DataDir is empty join an
	// existing cluster as a learner, with what AddLearner returned on one
	// of its members. When nil, an empty DataDir bootstraps a new
	// cluster. Once DataDir holds data, Join is ignored.
	Join *JoinCluster
}

// peerPort is the port the member peers on.
func (c *Config) peerPort() int {
	return c.Ports.WithDefaults().EtcdPeer
}

// PeerURL is the URL on which the other members reach this member.
func (c *Config) PeerURL() string {
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(c.PeerIP.String(), strconv.Itoa(c.peerPort()))}
	return u.String()
}

func (c *Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("no member name")
	case c.DataDir == "":
		return errors.New("no data directory")
	case c.SocketPath == "":
		return errors.New("no client socket path")
	case c.PeerIP == nil:
		return errors.New("no peer IP")
	case len(c.PrivateKey) != ed25519.PrivateKeySize:
		return errors.New("no node private key")
	}
	return nil
}

// Status is what a running consensus Service offers the rest of the node.
// A Status is immutable; a new one is published when anything changes.
type Status struct {
	// Running is true while the local etcd member is up and its client
	// usable. The other fields are only meaningful when it is true.
	Running bool
	// ID is the local member's ID in the cluster.
	ID uint64
	// Name is the local member's name (Config.Name).
	Name string
	// Learner is true while the local member is a learner: it replicates
	// the data but does not vote, and serves only serializable reads.
	// It becomes a voting member once a voting member promotes it.
	Learner bool

	client *Client
	raw    *clientv3.Client
	server *etcdserver.EtcdServer
	// dataDir is Config.DataDir, where Snapshot keeps its file.
	dataDir string
	// holds counts the Holds of the Service that published this Status.
	holds *holds.Count
}

// Hold keeps the local etcd member serving, once the Service's context
// has ended, until release is called or stopGrace has passed: for a user
// of etcd with a last call to make on its way down, such as the curator's
// resignation from its election or a Kubernetes leader's lease release
// through the apiserver's etcd proxy. The parts of the node stop at the same
// moment, and without a Hold etcd may close first. Hold is only
// meaningful on a Running Status; release may be called more than once.
func (s *Status) Hold() (release func()) {
	if s.holds == nil {
		return func() {}
	}
	return s.holds.Take()
}

// Client returns a client of the local etcd member for the whole key space.
// Parts of the node take a namespace of their own with Sub. The client stops
// working once the Status is no longer current (etcd stopped).
func (s *Status) Client() *Client { return s.client }

// RawClient returns the etcd client of the local member itself, for the
// whole key space, for what needs etcd's own API (the Kubernetes
// apiserver's confining proxy dials etcd like it). It stops working, like
// Client, once the Status is no longer current.
func (s *Status) RawClient() *clientv3.Client { return s.raw }

// Server returns the local etcd member's server itself, for callers in
// this process that would otherwise cross a gRPC connection to reach it on
// every call (the apiserver's etcd proxy). Like the clients, it stops
// serving once the Status is no longer current.
func (s *Status) Server() *etcdserver.EtcdServer { return s.server }

// Service runs this node's etcd member. Build it with New and run Run under
// a supervisor; follow Status for the result.
type Service struct {
	cfg    Config
	status memory.Value[*Status]

	// mu guards last, the Status most recently published.
	mu   sync.Mutex
	last *Status

	holds holds.Count
	// grace is stopGrace, another bound in tests.
	grace time.Duration
}

// New returns a Service for cfg. Nothing happens until Run.
func New(cfg Config) *Service {
	return &Service{cfg: cfg, grace: stopGrace}
}

// Status is the Service's current Status. It starts out not Running.
func (s *Service) Status() event.Watchable[*Status] { return &s.status }

func (s *Service) setStatus(f func(st *Status)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &Status{}
	if s.last != nil {
		*st = *s.last
	}
	f(st)
	s.last = st
	s.status.Set(st)
}

// Paths inside Config.DataDir.
func (s *Service) etcdDir() string { return filepath.Join(s.cfg.DataDir, "etcd") }
func (s *Service) tlsDir() string  { return filepath.Join(s.cfg.DataDir, "peer-tls") }
func (s *Service) tlsPath(f string) string {
	return filepath.Join(s.tlsDir(), f)
}
func (s *Service) removedMarker() string { return filepath.Join(s.cfg.DataDir, "removed") }

// HasData tells whether dataDir, a Config.DataDir, holds an etcd member:
// etcd has run on it, so it has a write-ahead log. A member without one
// still has to bootstrap or join; one with it restarts on its data. A
// directory that does not exist holds nothing.
func HasData(dataDir string) (bool, error) {
	entries, err := os.ReadDir(filepath.Join(dataDir, "etcd", "member", "wal"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("when looking for etcd data: %w", err)
	}
	return len(entries) > 0, nil
}

// hasData is HasData of DataDir.
func (s *Service) hasData() (bool, error) { return HasData(s.cfg.DataDir) }

// Run runs the etcd member until ctx is done or etcd stops. See the package
// documentation for what happens on the first start.
func (s *Service) Run(ctx context.Context) error {
	if err := s.cfg.validate(); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	lg := supervisor.Logger(ctx)
	defer s.setStatus(func(st *Status) { *st = Status{Name: s.cfg.Name} })

	if err := s.removeStaleSnapshots(); err != nil {
		return err
	}
	if s.restoreStaged() {
		if err := s.restore(ctx); err != nil {
			return fmt.Errorf("when restoring a backup: %w", err)
		}
	}
	if _, err := os.Stat(s.removedMarker()); err == nil {
		return ErrMemberRemoved
	}
	hasData, err := s.hasData()
	if err != nil {
		return err
	}
	joining := s.cfg.Join != nil && !hasData
	if !s.peerTLSReady() {
		var err error
		switch {
		case joining:
			lg.Infof("joining existing cluster %s", s.cfg.Join.InitialCluster)
			err = s.writeJoinFiles()
		default:
			err = s.bootstrap(ctx)
		}
		if err != nil {
			return err
		}
	}

	inst, err := s.start(ctx, s.memberConfig(joining), true)
	if errors.Is(err, ErrMemberRemoved) {
		return s.markRemoved(err)
	}
	if err != nil {
		return fmt.Errorf("when starting etcd: %w", err)
	}
	defer inst.close()
	id := uint64(inst.e.Server.MemberID())
	learner, _ := isLearner(inst)
	lg.Infof("etcd member %x (%s) running, learner: %v", id, s.cfg.Name, learner)
	marker.Log(lg, marker.EtcdRunning, "learner", strconv.FormatBool(learner))
	s.setStatus(func(st *Status) {
		*st = Status{
			Running: true,
			ID:      id,
			Name:    s.cfg.Name,
			Learner: learner,
			client:  newClient(inst.client, ""),
			raw:     inst.client,
			server:  inst.e.Server,
			dataDir: s.cfg.DataDir,
			holds:   &s.holds,
		}
	})
	// From here on a user may hold etcd: every way out keeps it for them.
	for _, w := range []struct {
		name string
		run  supervisor.Runnable
	}{
		{"membership", s.runMembership(inst)},
		{"crl", s.runCRL(inst)},
		{"peer-renewal", s.runPeerRenewal(inst)},
	} {
		if err := supervisor.Run(ctx, w.name, w.run); err != nil {
			s.keepForHolds(ctx, inst)
			return err
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return s.wait(ctx, inst)
}

// stopGrace is how long etcd keeps serving, at most, after the Service's
// context ended, while a Hold is taken. The parts of the node that use
// etcd stop at the same moment, and some have a last call to make: the
// curator resigns its leadership, so that another curator takes over at
// once instead of after its lease's lifetime. On a loaded machine that
// call takes seconds.
const stopGrace = 5 * time.Second

// wait blocks until ctx is done or the etcd instance stops, and says why.
// Once ctx is done, it waits for the Holds to be released, for at most
// stopGrace (s.grace).
func (s *Service) wait(ctx context.Context, inst *instance) error {
	select {
	case <-ctx.Done():
		s.keepForHolds(ctx, inst)
		return ctx.Err()
	case err := <-inst.e.Err():
		return fmt.Errorf("etcd serving failed: %w", err)
	case <-inst.trap.trapped():
		return fmt.Errorf("etcd failed fatally: %s", inst.trap.message())
	case <-inst.e.Server.StopNotify():
		if inst.removed() {
			return s.markRemoved(ErrMemberRemoved)
		}
		return errors.New("etcd server stopped")
	}
}

// keepForHolds, once ctx is done, keeps inst serving until the Holds are
// released, for at most s.grace, or until it stops on its own.
func (s *Service) keepForHolds(ctx context.Context, inst *instance) {
	if ctx.Err() == nil {
		return
	}
	select {
	case <-s.holds.None():
	case <-time.After(s.grace):
		supervisor.Logger(ctx).Warningf("Stopping etcd %v after the node asked, with a user still holding it", s.grace)
	case <-inst.e.Server.StopNotify():
	}
}

// markRemoved marks DataDir as removed, so that etcd never starts on it
// again, and returns err, which says that the member was removed.
func (s *Service) markRemoved(err error) error {
	if merr := os.WriteFile(s.removedMarker(), nil, 0o600); merr != nil {
		return fmt.Errorf("%w (and when marking it: %w)", err, merr)
	}
	return err
}
