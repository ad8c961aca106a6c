package consensus

import (
	"context"
	"crypto/ed25519"
	"net"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdLeaks()...)
}

// etcdLeaks lists goroutines that etcd and grpc leave running after an
// embedded server and its clients are closed. They are etcd's, not ours:
// besides those of any embedded etcd, the net/http ones are keep-alive
// connections between members (peer transports and version probes) that
// etcd's Close does not shut; nothing in this package uses net/http.
func etcdLeaks() []goleak.Option {
	return append(etcdtest.LeakOptions(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	)
}

// testNode is one simulated node: a consensus Service under a supervision
// tree of its own, like on a real node, with its own key, data directory,
// socket and peer port on 127.0.0.1.
type testNode struct {
	cfg Config
	svc *Service
	// grace, when set, replaces stopGrace.
	grace time.Duration

	cancel  context.CancelFunc
	sup     *supervisor.Supervisor
	lt      *logtree.LogTree
	stopLog func()
}

func newTestNode(t testing.TB) *testNode {
	t.Helper()
	priv := identitytest.NewKey(t)
	dir := t.TempDir()
	return &testNode{cfg: Config{
		Name:       identity.NodeID(priv.Public().(ed25519.PublicKey)),
		DataDir:    filepath.Join(dir, "data"),
		SocketPath: filepath.Join(dir, "etcd.sock"),
		PeerIP:     net.IPv4(127, 0, 0, 1),
		Ports:      ports.Table{EtcdPeer: fixture.FreePort(t)},
		PrivateKey: priv,
	}}
}

// start runs the node's Service. Stopped with stop, or when the test ends.
func (n *testNode) start(t testing.TB) {
	t.Helper()
	n.svc = New(n.cfg)
	if n.grace != 0 {
		n.svc.grace = n.grace
	}
	ctx, cancel := context.WithCancel(context.Background())
	lt := logtree.New()
	w := fixture.NewLogWriter(t, n.cfg.Name[:12]+" ")
	stopConsole := lt.Console(w, logtree.ConsoleMinimumSeverity(logtree.WARNING))
	n.cancel = cancel
	n.lt = lt
	n.sup = supervisor.New(ctx, n.svc.Run, supervisor.WithLogTree(lt), supervisor.WithPropagatePanic())
	n.stopLog = func() { stopConsole(); w.Close() }
	t.Cleanup(n.stop)
}

// stop cancels the node's tree and waits until everything in it returned.
func (n *testNode) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.sup.Wait()
	n.stopLog()
	n.cancel = nil
}

// waitStatus waits for a Status of n accepted by pred.
func (n *testNode) waitStatus(t testing.TB, what string, pred func(*Status) bool) *Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := event.Get(ctx, n.svc.Status(), event.NotNil[*Status](), event.Filter(pred))
	if err != nil {
		t.Fatalf("%s: waiting for %s: %v", n.cfg.Name, what, err)
	}
	return st
}

func (n *testNode) waitRunning(t testing.TB) *Status {
	t.Helper()
	return n.waitStatus(t, "running", func(s *Status) bool { return s.Running })
}

func (n *testNode) waitVoter(t testing.TB) *Status {
	t.Helper()
	return n.waitStatus(t, "voting member", func(s *Status) bool { return s.Running && !s.Learner })
}

// testTimeout bounds each test: etcd members joining one another take
// longer than fixture.DefaultTimeout allows on a loaded machine.
const testTimeout = 3 * time.Minute
