// Package consensustest runs real embedded etcd members (consensus.Service)
// on 127.0.0.1 for the tests of packages built on consensus: the curator,
// enrolment, cairnctl.
//
// Each Member runs under a supervision tree of its own, like on a node, so
// a test can stop one and start it again on the same data directory. Its
// warnings and errors go to the test's log until it stops; the test's
// cleanup stops it and waits for every goroutine of the tree to return.
//
// The tests of node/consensus itself keep their own harness: this package
// imports consensus. Only tests import it.
package consensustest

import (
	"context"
	"crypto/ed25519"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// Member is one etcd member of a test.
type Member struct {
	// Config is what Start runs the member with. NewMember fills it for a
	// fresh single-member cluster; a test may change it (Join, DataDir)
	// before Start.
	Config consensus.Config
	// Service is the member's consensus service, set by Start.
	Service *consensus.Service

	stop func()
}

// NewMember prepares a member with key (a fresh one if nil): named after
// the key's node ID, its data and socket in a temporary directory, peering
// on a free port of 127.0.0.1.
func NewMember(t testing.TB, key ed25519.PrivateKey) *Member {
	t.Helper()
	if key == nil {
		key = identitytest.NewKey(t)
	}
	dir := t.TempDir()
	return &Member{Config: consensus.Config{
		Name:       identity.NodeID(key.Public().(ed25519.PublicKey)),
		DataDir:    filepath.Join(dir, "data"),
		SocketPath: filepath.Join(dir, "etcd.sock"),
		PeerIP:     net.IPv4(127, 0, 0, 1),
		Ports:      ports.Table{EtcdPeer: fixture.FreePort(t)},
		PrivateKey: key,
	}}
}

// Start runs the member with a new Service from Config until Stop or the
// end of the test.
func (m *Member) Start(t testing.TB) {
	t.Helper()
	m.Service = consensus.New(m.Config)
	m.stop = RunTree(t, m.Config.Name[:12]+" etcd ", m.Service.Run, logtree.New(), logtree.WARNING)
	t.Cleanup(m.stop)
}

// Stop stops the member and waits until its tree has returned. Stopping a
// member that is not running does nothing.
func (m *Member) Stop() {
	if m.stop != nil {
		m.stop()
	}
}

// WaitStatus waits up to three minutes for a status of the member that
// pred accepts, failing the test with what it waited for.
func (m *Member) WaitStatus(t testing.TB, what string, pred func(*consensus.Status) bool) *consensus.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := event.Get(ctx, m.Service.Status(), event.NotNil[*consensus.Status](), event.Filter(pred))
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v", m.Config.Name, what, err)
	}
	return st
}

// WaitVoter waits until the member runs as a voting member.
func (m *Member) WaitVoter(t testing.TB) *consensus.Status {
	t.Helper()
	return m.WaitStatus(t, "a voting member", func(s *consensus.Status) bool { return s.Running && !s.Learner })
}

// RunTree runs r under a supervisor of its own with log tree lt, passing
// entries of at least min to the test's log with prefix, and returns what
// stops it: cancel, wait for the tree, stop logging. Calling it again does
// nothing, so it can also be a cleanup.
func RunTree(t testing.TB, prefix string, r supervisor.Runnable, lt *logtree.LogTree, min logtree.Severity) func() {
	ctx, cancel := context.WithCancel(context.Background())
	w := fixture.NewLogWriter(t, prefix)
	stopConsole := lt.Console(w, logtree.ConsoleMinimumSeverity(min))
	sup := supervisor.New(ctx, r, supervisor.WithLogTree(lt), supervisor.WithPropagatePanic())
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			sup.Wait()
			stopConsole()
			w.Close()
		})
	}
}
