package curator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

func TestHealthRules(t *testing.T) {
	const interval = time.Second
	since := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return since.Add(d) }
	h := &heartbeats{}
	h.lead(since, interval)
	h.merge(1, map[string]time.Time{"stored": at(-500 * time.Millisecond), "gone": at(-time.Hour)}, 7, nil)
	h.beat("fresh", at(200*time.Millisecond))
	for _, tc := range []struct {
		id   string
		now  time.Duration
		want api.NodeHealth
	}{
		// Within the grace (1.25 intervals), only what this leader heard
		// itself counts.
		{"stored", 100 * time.Millisecond, api.NodeHealth_NODE_HEALTH_UNKNOWN},
		{"gone", 1200 * time.Millisecond, api.NodeHealth_NODE_HEALTH_UNKNOWN},
		{"fresh", 300 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEALTHY},
		// After it, the last beat any leader heard, against the timeout
		// (2 intervals).
		{"stored", 1500 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEALTHY},
		{"stored", 1600 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT},
		{"gone", 1500 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT},
		{"fresh", 2200 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEALTHY},
		{"fresh", 2300 * time.Millisecond, api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT},
		// No leader ever heard from it.
		{"never", time.Hour, api.NodeHealth_NODE_HEALTH_UNKNOWN},
	} {
		if got := h.health(tc.id, at(tc.now)); got != tc.want {
			t.Errorf("health(%s) %v after taking the lead = %v, want %v", tc.id, tc.now, got, tc.want)
		}
	}

	// A load of an earlier term is not applied to this one.
	h.lead(at(time.Minute), interval)
	h.merge(1, map[string]time.Time{"late": at(time.Minute)}, 9, nil)
	if _, ok := h.last("late"); ok {
		t.Error("times loaded in an earlier term were applied to the next")
	}
	if _, loaded := h.term(); loaded {
		t.Error("a load of an earlier term marked the new one loaded")
	}
}

// TestHealthJudgement judges the nodes of a leader as time passes: a view
// is published only when a node's health changed, names the nodes that
// changed since an earlier view, and ends with the term.
func TestHealthJudgement(t *testing.T) {
	const interval = time.Second
	since := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return since.Add(d) }
	h := &heartbeats{}
	h.judge(since)
	if v := h.currentView(); v != nil {
		t.Fatalf("a curator that never led published %+v", v)
	}
	h.lead(since, interval)
	first := h.currentView()
	if !first.leading || len(first.nodes) != 0 {
		t.Fatalf("the first view of a term = %+v, want every node UNKNOWN", first)
	}
	h.beat("a", at(0))
	h.beat("b", at(0))
	h.judge(at(100 * time.Millisecond))
	v := h.currentView()
	if got := v.changedSince(first.seq); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("changed after the first beats = %v, want [a b]", got)
	}
	if got := v.health("a"); got != api.NodeHealth_NODE_HEALTH_HEALTHY {
		t.Errorf("a after a beat is %v, want HEALTHY", got)
	}
	h.judge(at(200 * time.Millisecond))
	if h.currentView() != v {
		t.Error("a judgement that changed nothing published a view")
	}
	// b beats on, a falls silent for longer than the timeout.
	h.beat("b", at(2*time.Second))
	h.judge(at(2100 * time.Millisecond))
	w := h.currentView()
	if got := w.changedSince(v.seq); !slices.Equal(got, []string{"a"}) {
		t.Errorf("changed after a fell silent = %v, want [a]", got)
	}
	if got := w.health("a"); got != api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT {
		t.Errorf("a after its silence is %v, want HEARTBEAT_TIMEOUT", got)
	}
	if got := w.health("never"); got != api.NodeHealth_NODE_HEALTH_UNKNOWN {
		t.Errorf("a node never heard of is %v, want UNKNOWN", got)
	}
	// A node deleted leaves the view without a change to send.
	h.remove("b")
	h.judge(at(2200 * time.Millisecond))
	x := h.currentView()
	if _, ok := x.nodes["b"]; ok || len(x.changedSince(w.seq)) != 0 {
		t.Errorf("after b was removed the view is %+v, want it without b and no change", x)
	}
	h.follow()
	if end := h.currentView(); end.leading || end.seq <= x.seq {
		t.Errorf("after the term ended the view is %+v, want a newer one, not leading", end)
	}
	h.beat("a", at(3*time.Second))
	h.judge(at(3100 * time.Millisecond))
	if h.currentView().leading {
		t.Error("a curator that follows judged health")
	}
}

// beater beats as node n at addr every interval until stopped, and
// remembers the last error.
type beater struct {
	stop func()
	mu   sync.Mutex
	err  error
}

func startBeating(t *testing.T, n *testNode, addr string, interval time.Duration) *beater {
	t.Helper()
	cl := n.client(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	b := &beater{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cl.Heartbeat(cctx, &api.HeartbeatRequest{})
			ccancel()
			if err != nil && ctx.Err() == nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	b.stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(b.stop)
	return b
}

// lastError is the last error of a beat.
func (b *beater) lastError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// health returns the health and last heartbeat of node id through m.
func health(t *testing.T, m api.ManagementClient, id string) (api.NodeHealth, time.Time) {
	t.Helper()
	n := getNode(t, m, id)
	var last time.Time
	if n.LastHeartbeatUnixNanos != 0 {
		last = time.Unix(0, n.LastHeartbeatUnixNanos)
	}
	return n.Health, last
}

// waitHealth polls node id through m every 20 ms until it is want, and
// returns when it first was.
func waitHealth(t *testing.T, m api.ManagementClient, id string, want api.NodeHealth, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, _ := health(t, m, id)
		if got == want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still %v after %v, want %v", id, got, timeout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHeartbeatTimeout lets a node beat and then fall silent: it is
// HEALTHY while it beats and HEARTBEAT_TIMEOUT within two heartbeat
// timeouts of its last beat. A node no leader heard from is UNKNOWN.
func TestHeartbeatTimeout(t *testing.T) {
	const interval = 500 * time.Millisecond
	c := newTestCluster(t, WithHeartbeatInterval(interval))
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	x := newTestNode(t)
	c.enrol(t, addr, x)

	b := startBeating(t, x, addr, interval)
	waitHealth(t, m, x.id(), api.NodeHealth_NODE_HEALTH_HEALTHY, 30*time.Second)
	b.stop()
	stopped := time.Now()
	// When the leader heard the last beat, by its clock.
	got, dead := health(t, m, x.id())
	if got != api.NodeHealth_NODE_HEALTH_HEALTHY || dead.After(stopped) || stopped.Sub(dead) > 2*interval {
		t.Errorf("right after its last beat, %s is %v with last heartbeat %v; want HEALTHY, beaten within %v before %v", x.id(), got, dead, 2*interval, stopped)
	}
	timedOut := waitHealth(t, m, x.id(), api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, 30*time.Second)
	took := timedOut.Sub(dead)
	t.Logf("last beat → HEARTBEAT_TIMEOUT: %v (timeout %v)", took.Round(time.Millisecond), heartbeatTimeout(interval))
	if limit := 2 * heartbeatTimeout(interval); took > limit {
		t.Errorf("%s turned HEARTBEAT_TIMEOUT %v after its last beat, want within %v", x.id(), took, limit)
	}
	if got, _ := health(t, m, c.nodes[0].id()); got != api.NodeHealth_NODE_HEALTH_UNKNOWN {
		t.Errorf("the bootstrap node, which never beat, is %v, want UNKNOWN", got)
	}
}

// storedHeartbeat reads when the stored heartbeat times say node id was
// last heard from, through the etcd of n.
func storedHeartbeat(t *testing.T, n *testNode, id string) time.Time {
	t.Helper()
	cl, err := curatorClient(n.member.WaitVoter(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Get(fixture.Context(t), heartbeatsKey)
	if err != nil {
		t.Fatalf("reading %s: %v", heartbeatsKey, err)
	}
	if len(resp.Kvs) == 0 {
		return time.Time{}
	}
	seen, _, err := decodeHeartbeats(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return seen[id]
}

// TestHealthAcrossLeaderChange stops the leader's curator right after a
// node fell silent: the new leader knows when that node last beat from
// the stored times, says UNKNOWN about it until a heartbeat period has
// passed, then HEARTBEAT_TIMEOUT, within two heartbeat timeouts of its
// last beat; a node that keeps beating is HEALTHY at the new leader.
func TestHealthAcrossLeaderChange(t *testing.T) {
	const interval = time.Second
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option(), WithHeartbeatInterval(interval))
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	addr0 := n0.addr.String()
	n1 := newTestNode(t)
	c.addMember(t, addr0, n1, ports)
	addr1 := n1.addr.String()
	// Again with the test's heartbeat interval, once it serves (a curator
	// stopped before it serves keeps its listener).
	waitLeader(t, n1, addr1, "")
	n1.stopCurator()
	n1.startCurator(t, ports.option(), WithHeartbeatInterval(interval))
	if got := waitLeader(t, n1, addr1, ""); got != n0.id() {
		t.Fatalf("leader = %s, want %s", got, n0.id())
	}

	x, y := newTestNode(t), newTestNode(t)
	c.enrol(t, addr0, x)
	c.enrol(t, addr0, y)
	// Both beat through the follower, which forwards to the leader and
	// will lead itself.
	bx := startBeating(t, x, addr1, interval)
	by := startBeating(t, y, addr1, interval)
	m1 := c.mgmt(t, addr1)
	waitHealth(t, m1, x.id(), api.NodeHealth_NODE_HEALTH_HEALTHY, 30*time.Second)
	bx.stop()
	// When the leader heard the last beat, by its clock.
	_, dead := health(t, m1, x.id())
	// The leader stores it within an interval.
	fixture.Eventually(t, 10*interval, "the last beat of x stored", func() error {
		if got := storedHeartbeat(t, n1, x.id()); got.Before(dead.Truncate(time.Millisecond)) {
			return fmt.Errorf("stored %v, last beat %v", got, dead)
		}
		return nil
	})

	stopped := time.Now()
	n0.stopCurator()
	var first *api.Node
	fixture.Eventually(t, 30*time.Second, "GetNodes through the new leader", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := m1.GetNodes(ctx, &api.GetNodesRequest{Filter: &api.NodeFilter{Ids: []string{x.id()}}})
		if err != nil {
			return err
		}
		first = resp.Nodes[0]
		return nil
	})
	answered := time.Since(stopped)
	t.Logf("leader's curator stopped → first answer of the new leader: %v", answered.Round(time.Millisecond))
	if answered < heartbeatGrace(interval) {
		if first.Health != api.NodeHealth_NODE_HEALTH_UNKNOWN {
			t.Errorf("%v after the leader changed, the new leader says %s is %v, want UNKNOWN", answered, x.id(), first.Health)
		}
	} else {
		t.Logf("the new leader answered only after the grace of %v: UNKNOWN not checked", heartbeatGrace(interval))
	}
	// The new leader loaded when the old one last heard from x.
	fixture.Eventually(t, 10*time.Second, "the last heartbeat of x at the new leader", func() error {
		if _, last := health(t, m1, x.id()); last.Before(dead.Truncate(time.Millisecond)) {
			return fmt.Errorf("last heartbeat %v, want %v", last, dead)
		}
		return nil
	})
	timedOut := waitHealth(t, m1, x.id(), api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, 30*time.Second)
	took := timedOut.Sub(dead)
	t.Logf("last beat → HEARTBEAT_TIMEOUT across a leader change: %v (timeout %v)", took.Round(time.Millisecond), heartbeatTimeout(interval))
	if limit := 2 * heartbeatTimeout(interval); took > limit {
		t.Errorf("%s turned HEARTBEAT_TIMEOUT %v after its last beat, want within %v", x.id(), took, limit)
	}
	if got, _ := health(t, m1, y.id()); got != api.NodeHealth_NODE_HEALTH_HEALTHY {
		t.Errorf("%s, beating all along, is %v at the new leader, want HEALTHY (last beat error: %v)", y.id(), got, by.lastError())
	}
}

// TestHeartbeatWrites counts etcd's writes (its revision grows by one per
// write) while 1 and then 25 nodes beat every interval: the cost is one
// write per interval whatever the number of nodes.
func TestHeartbeatWrites(t *testing.T) {
	const interval = 200 * time.Millisecond
	const rounds = 10
	// The test registers all its nodes from one address at once.
	burst := withLimits(func(l *limits) { l.registerBurst = 100 })
	c := newTestCluster(t, WithHeartbeatInterval(interval), burst)
	n0 := c.nodes[0]
	addr := n0.addr.String()
	waitLeader(t, n0, addr, "")
	etcd := n0.member.WaitVoter(t).Client()
	ctx := fixture.Context(t)
	revision := func() int64 {
		t.Helper()
		resp, err := etcd.Get(ctx, "no such key")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	var clients []api.CuratorClient
	for _, size := range []int{1, 25} {
		for len(clients) < size {
			n := newTestNode(t)
			c.enrol(t, addr, n)
			clients = append(clients, api.NewCuratorClient(dial(t, addr, rpc.NodeCredentials(n.ident))))
		}
		beat := func() {
			var wg sync.WaitGroup
			for _, cl := range clients {
				wg.Go(func() {
					if _, err := cl.Heartbeat(ctx, &api.HeartbeatRequest{}); err != nil {
						t.Errorf("Heartbeat: %v", err)
					}
				})
			}
			wg.Wait()
		}
		// One round first, and time for it to be stored, so that the
		// count starts from a quiet state.
		beat()
		time.Sleep(2 * interval)
		before := revision()
		start := time.Now()
		for r := range rounds {
			time.Sleep(time.Until(start.Add(time.Duration(r) * interval)))
			beat()
		}
		time.Sleep(time.Until(start.Add(rounds * interval)))
		writes := revision() - before
		t.Logf("%d node(s), %d beats over %d intervals: %d etcd writes", size, size*rounds, rounds, writes)
		if writes > rounds+1 {
			t.Errorf("%d node(s) beating for %d intervals cost %d etcd writes, want at most %d (one per interval)", size, rounds, writes, rounds+1)
		}
	}
}

// watchedHealth follows the health of node id in the events of a Watch
// stream, until the stream or ctx ends.
type watchedHealth struct {
	name   string
	id     string
	health chan api.NodeHealth
	mu     sync.Mutex
	err    error
}

func followHealth(ctx context.Context, name, id string, s interface {
	Recv() (*api.WatchEvent, error)
}) *watchedHealth {
	w := &watchedHealth{name: name, id: id, health: make(chan api.NodeHealth)}
	go func() {
		defer close(w.health)
		for {
			ev, err := s.Recv()
			if err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			for _, n := range ev.Nodes {
				if n.Id != id {
					continue
				}
				select {
				case w.health <- n.Health:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return w
}

// wait reads events until one says the node is want, for up to timeout.
func (w *watchedHealth) wait(t *testing.T, want api.NodeHealth, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	last := "no event"
	for {
		select {
		case h, ok := <-w.health:
			if !ok {
				w.mu.Lock()
				defer w.mu.Unlock()
				t.Fatalf("Watch (%s) ended waiting for %s to be %v (last event: %s): %v", w.name, w.id, want, last, w.err)
			}
			if h == want {
				return
			}
			last = h.String()
		case <-timer.C:
			t.Fatalf("Watch (%s) sent no event saying %s is %v within %v (last event: %s)", w.name, w.id, want, timeout, last)
		}
	}
}

// TestWatchHealth follows a node through Watch, of all nodes and of that
// one node, while it beats, falls silent and beats again: both streams
// tell that it turned HEALTHY, HEARTBEAT_TIMEOUT and HEALTHY again, though
// its record in etcd never changed.
func TestWatchHealth(t *testing.T) {
	const interval = 300 * time.Millisecond
	c := newTestCluster(t, WithHeartbeatInterval(interval))
	n0 := c.nodes[0]
	addr := n0.addr.String()
	x := newTestNode(t)
	c.enrol(t, addr, x)
	ctx, cancel := context.WithCancel(fixture.Context(t))
	defer cancel()
	cur := n0.client(t, addr)
	all, err := cur.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{NodesInCluster: &api.WatchRequest_NodesInCluster{}}})
	if err != nil {
		t.Fatalf("Watch(all nodes): %v", err)
	}
	one, err := cur.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: x.id()}}})
	if err != nil {
		t.Fatalf("Watch(%s): %v", x.id(), err)
	}
	streams := []*watchedHealth{followHealth(ctx, "all nodes", x.id(), all), followHealth(ctx, "one node", x.id(), one)}
	const timeout = 20 * time.Second

	b := startBeating(t, x, addr, interval)
	for _, s := range streams {
		s.wait(t, api.NodeHealth_NODE_HEALTH_HEALTHY, timeout)
	}
	b.stop()
	for _, s := range streams {
		s.wait(t, api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT, timeout)
	}
	startBeating(t, x, addr, interval)
	for _, s := range streams {
		s.wait(t, api.NodeHealth_NODE_HEALTH_HEALTHY, timeout)
	}
}

// TestWatchEndsWithLeadership takes the lead from the only curator by
// deleting its candidacy: a Watch of nodes it serves ends with
// Unavailable, since the health it sends would go stale, while a Watch of
// the configuration goes on.
func TestWatchEndsWithLeadership(t *testing.T) {
	c := newTestCluster(t)
	n0 := c.nodes[0]
	addr := n0.addr.String()
	waitLeader(t, n0, addr, "")
	ctx := fixture.Context(t)
	cur := n0.client(t, addr)
	// Bounded, so that a stream that goes on fails the test.
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	nodes, err := cur.Watch(nctx, &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{NodesInCluster: &api.WatchRequest_NodesInCluster{}}})
	if err != nil {
		t.Fatalf("Watch(all nodes): %v", err)
	}
	recvEvent(t, nodes)
	conf, err := cur.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_Configuration_{Configuration: &api.WatchRequest_Configuration{}}})
	if err != nil {
		t.Fatalf("Watch(configuration): %v", err)
	}
	recvEvent(t, conf)

	etcd, err := curatorClient(n0.member.WaitVoter(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	if _, err := etcd.Delete(ctx, electionName+"/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("deleting the candidacies: %v", err)
	}
	if ev, err := nodes.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Watch(all nodes) after the curator stopped leading = %v, %v; want Unavailable", ev, err)
	}
	changed := proto.Clone(c.config).(*api.ClusterConfiguration)
	changed.TpmMode = api.TPMMode_TPM_MODE_REQUIRED
	data, err := proto.Marshal(changed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, configurationKey, string(data)); err != nil {
		t.Fatalf("changing the configuration: %v", err)
	}
	if ev := recvEvent(t, conf); ev.Configuration.GetTpmMode() != api.TPMMode_TPM_MODE_REQUIRED {
		t.Errorf("Watch(configuration) after the change = %v, want TPM mode REQUIRED", ev)
	}
}
