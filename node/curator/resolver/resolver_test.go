package resolver

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
	api "cairn.dev/cairn/proto/api"
)

// answerer returns the index of the fake curator that answers a Heartbeat
// on cc, or an error.
func answerer(ctx context.Context, cc *grpc.ClientConn) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := api.NewCuratorClient(cc).Heartbeat(ctx, &api.HeartbeatRequest{})
	if err != nil {
		return -1, err
	}
	return int(res.GetIntervalMillis()), nil
}

// waitAnswerer calls until curator want answers, and returns how many calls
// failed on the way and for how long calls failed.
func waitAnswerer(t *testing.T, cc *grpc.ClientConn, want int) (failed int, outage time.Duration) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var firstFail time.Time
	for time.Now().Before(deadline) {
		got, err := answerer(context.Background(), cc)
		if err != nil {
			if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
				t.Fatalf("Heartbeat: %v, want success or Unavailable", err)
			}
			if firstFail.IsZero() {
				firstFail = time.Now()
			}
			failed++
		} else if firstFail != (time.Time{}) && outage == 0 {
			outage = time.Since(firstFail)
		}
		if err == nil && got == want {
			return failed, outage
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("curator %d never answered", want)
	return 0, 0
}

// start runs the fake cluster and r under a test supervisor, and dials a
// ClientConn through r.
func start(t *testing.T, c *fakeCluster, r *Resolver) *grpc.ClientConn {
	t.Helper()
	supervisortest.Harness(t, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "cluster", c.run); err != nil {
			return err
		}
		if err := supervisor.Run(ctx, "resolver", r.Run); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	})
	cc, err := r.Dial()
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestFollowsLeader moves the leadership between curators and checks that
// calls follow it, and that a leader that goes down costs only a short
// outage.
func TestFollowsLeader(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 3)
	c.leader.Set(1)
	r := New(ca.Node(t), c.addrs())
	cc := start(t, c, r)

	waitAnswerer(t, cc, 1)
	// A call may reach the leader before the resolver has named it (any
	// curator is dialled while none is known): wait for the name.
	want := c.curators[1].addr
	for deadline := time.Now().Add(10 * time.Second); r.Leader() != want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if got := r.Leader(); got != want {
		t.Errorf("Leader() = %q, want %q", got, want)
	}

	c.leader.Set(2)
	if failed, _ := waitAnswerer(t, cc, 2); failed > 0 {
		t.Errorf("%d calls failed while leadership moved between running curators, want 0", failed)
	}

	// The leader dies; a while later, the election names another.
	c.up[2].Set(false)
	time.Sleep(500 * time.Millisecond)
	c.leader.Set(0)
	_, outage := waitAnswerer(t, cc, 0)
	t.Logf("outage while the leader died: %v", outage)
}

// TestElectionFallsBack checks that while no curator leads, calls are
// sent to any curator that answers (which would forward them).
func TestElectionFallsBack(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 2)
	c.leader.Set(1)
	r := New(ca.Node(t), c.addrs())
	cc := start(t, c, r)
	waitAnswerer(t, cc, 1)

	c.up[1].Set(false)
	c.leader.Set(-1)
	waitAnswerer(t, cc, 0)
	if got := r.Leader(); got != "" {
		t.Errorf("Leader() = %q during an election, want \"\"", got)
	}
}

// TestSkipsSilentEndpoint gives a first seed that accepts connections but
// never answers, like a curator whose machine hung: the probe must move on.
func TestSkipsSilentEndpoint(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 1)
	c.leader.Set(0)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := New(ca.Node(t), append([]string{silent.Addr().String()}, c.addrs()...))
	r.probeInterval = 200 * time.Millisecond
	r.probeTimeout = 300 * time.Millisecond
	start(t, c, r)

	deadline := time.Now().Add(20 * time.Second)
	for r.Leader() != c.curators[0].addr {
		if time.Now().After(deadline) {
			t.Fatalf("Leader() = %q, want %q", r.Leader(), c.curators[0].addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPassesOverLeaderlessCurator gives the node a curator of its own that
// names no leader, as one does after its node was cut off, until its etcd
// member catches up: the resolver must learn the leader from another
// curator, and send calls there, within a few seconds.
func TestPassesOverLeaderlessCurator(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 2)
	c.leader.Set(1)
	c.curators[0].blind = true
	r := New(ca.Node(t), c.addrs())
	r.SetLocal(c.curators[0].addr)
	begin := time.Now()
	cc := start(t, c, r)

	want := c.curators[1].addr
	deadline := time.Now().Add(leaderlessFor + 10*time.Second)
	for r.Leader() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Leader() = %q %v after start, want %q", r.Leader(), time.Since(begin), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("leader learned from another curator %v after start", time.Since(begin).Round(time.Millisecond))
	if got, err := answerer(context.Background(), cc); err != nil || got != 1 {
		t.Errorf("call answered by curator %d (%v), want the leader, 1", got, err)
	}
}

// TestStaysWithOnlyCurator checks that a curator that names no leader is
// not given up when it is the only one known: no other could say more.
func TestStaysWithOnlyCurator(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 1)
	c.leader.Set(-1)
	r := New(ca.Node(t), nil)
	r.SetLocal(c.curators[0].addr)
	start(t, c, r)
	// A session may fail before the fake curator listens; what counts is
	// that the one that reached it is kept past leaderlessFor.
	deadline := time.Now().Add(20 * time.Second)
	for c.curators[0].streams.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the resolver never opened a GetCurrentLeader stream to the only curator")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	r.failed = ""
	r.mu.Unlock()
	time.Sleep(leaderlessFor + time.Second)
	r.mu.Lock()
	failed := r.failed
	r.mu.Unlock()
	if failed != "" {
		t.Errorf("the session with the only curator ended (failed = %q), want it kept", failed)
	}
}

// TestLearnsCurators starts with no seed at all and learns the curators
// through SetCurators.
func TestLearnsCurators(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	c := newFakeCluster(t, ca, 2)
	c.leader.Set(1)
	r := New(ca.Node(t), nil)
	cc := start(t, c, r)

	r.SetCurators(c.addrs()[:1])
	waitAnswerer(t, cc, 1)
}

func TestDirectoryEndpoints(t *testing.T) {
	dir := &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{
		{Id: "a", Addresses: []*api.ClusterDirectory_Node_Address{{Host: "10.0.0.1"}, {Host: "fd00::1"}}},
		{Id: "b", Addresses: []*api.ClusterDirectory_Node_Address{{Host: ""}}},
		{Id: "c", Addresses: []*api.ClusterDirectory_Node_Address{{Host: "10.0.0.3"}}},
	}}
	for _, tc := range []struct {
		port int
		want []string
	}{
		{0, []string{"10.0.0.1:7833", "[fd00::1]:7833", "10.0.0.3:7833"}},
		{9000, []string{"10.0.0.1:9000", "[fd00::1]:9000", "10.0.0.3:9000"}},
	} {
		if diff := cmp.Diff(tc.want, DirectoryEndpoints(dir, tc.port)); diff != "" {
			t.Errorf("DirectoryEndpoints(port %d) (-want +got):\n%s", tc.port, diff)
		}
	}
}

// TestNextEndpoint checks the order in which Run follows endpoints: the
// node's own curator unless it just failed, else the others in turn,
// never the one that just failed while another is known.
func TestNextEndpoint(t *testing.T) {
	ca := identitytest.NewCA(t, "test CA")
	r := New(ca.Node(t), []string{"a:1", "b:1", "c:1"})
	ctx := context.Background()
	next := func(failed string) string {
		t.Helper()
		r.mu.Lock()
		r.failed = failed
		r.mu.Unlock()
		ep, err := r.nextEndpoint(ctx)
		if err != nil {
			t.Fatalf("nextEndpoint: %v", err)
		}
		return ep
	}
	var got []string
	for _, failed := range []string{"", "a:1", "b:1", "c:1"} {
		got = append(got, next(failed))
	}
	// In turn, then a:1 again is passed over: it just failed.
	if want := []string{"a:1", "b:1", "c:1", "a:1"}; !slices.Equal(got, want) {
		t.Errorf("in turn: %q, want %q", got, want)
	}
	if ep := next("a:1"); ep != "b:1" {
		t.Errorf("after a:1 failed, with a:1 next in turn: %q, want b:1", ep)
	}
	r.SetLocal("local:1")
	for _, failed := range []string{"", "b:1", "c:1"} {
		if ep := next(failed); ep != "local:1" {
			t.Errorf("with a local curator, after %q failed: %q, want local:1", failed, ep)
		}
	}
	if ep := next("local:1"); ep == "local:1" {
		t.Errorf("right after the local curator failed: %q, want another endpoint", ep)
	}
	r2 := New(ca.Node(t), []string{"only:1"})
	r2.failed = "only:1"
	if ep, err := r2.nextEndpoint(ctx); err != nil || ep != "only:1" {
		t.Errorf("the only endpoint, which just failed: %q, %v; want it again", ep, err)
	}
}
