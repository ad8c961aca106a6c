package curator

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// unanswered is a context for a call the server is expected to end on its
// own: it has no deadline, and should the server not end the call, the
// test cancels it after a while, so that the call fails with Canceled,
// not with the DeadlineExceeded the server should have sent.
func unanswered(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(30*time.Second, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

// TestEscrowDeadlines opens AAA.Escrow without a certificate and sends
// nothing, then sends the hello and nothing more: the curator ends each
// stream with DeadlineExceeded, the first after the hello's deadline, the
// second after the whole exchange's.
func TestEscrowDeadlines(t *testing.T) {
	c := newTestCluster(t, withLimits(func(l *limits) {
		// Long enough for newTestCluster's own Escrow on a busy machine.
		l.escrowHelloTimeout = time.Second
		l.escrowTimeout = 4 * time.Second
	}))
	creds, err := rpc.EphemeralCredentials(c.ca, nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	aaa := api.NewAAAClient(dial(t, c.nodes[0].addr.String(), creds))

	stream, err := aaa.Escrow(unanswered(t))
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	start := time.Now()
	if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Escrow without a hello = %v, want DeadlineExceeded", err)
	}
	t.Logf("a stream without a hello ended after %v", time.Since(start))

	stream, err = aaa.Escrow(unanswered(t))
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	start = time.Now()
	hello := &api.EscrowFromClient_Hello{OwnerPublicKey: c.ownerKey.Public().(ed25519.PublicKey)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: hello}}); err != nil {
		t.Fatalf("sending the hello: %v", err)
	}
	if msg, err := stream.Recv(); err != nil || msg.GetChallenge() == nil {
		t.Fatalf("Escrow after the hello = %v, %v, want a challenge", msg, err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Escrow without a proof = %v, want DeadlineExceeded", err)
	}
	t.Logf("a stream without a proof ended %v after it began", time.Since(start))
}

// TestNodeLimits runs a curator with a small cap on Watch streams and a
// slow status rate, and checks what each node may do.
func TestNodeLimits(t *testing.T) {
	const watches, writes = 3, 2
	c := newTestCluster(t, withLimits(func(l *limits) {
		l.maxWatchesPerNode = watches
		l.statusWriteBurst = writes
		l.statusWriteInterval = time.Hour
	}))
	addr := c.nodes[0].addr.String()
	n, other := c.nodes[0], newTestNode(t)
	c.enrol(t, addr, other)
	cur := n.client(t, addr)

	t.Run("watch", func(t *testing.T) {
		// watch opens a Watch as node of on cur and waits for its backlog.
		watch := func(cur api.CuratorClient, of *testNode) (context.CancelFunc, error) {
			ctx, cancel := context.WithCancel(fixture.Context(t))
			stream, err := cur.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: of.id()}}})
			if err == nil {
				_, err = stream.Recv()
			}
			if err != nil {
				cancel()
			}
			return cancel, err
		}
		var open []context.CancelFunc
		for i := range watches {
			cancel, err := watch(cur, n)
			if err != nil {
				t.Fatalf("Watch %d of %d: %v", i+1, watches, err)
			}
			open = append(open, cancel)
		}
		if _, err := watch(cur, n); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Watch %d of a node = %v, want ResourceExhausted", watches+1, err)
		}
		if cancel, err := watch(other.client(t, addr), other); err != nil {
			t.Errorf("Watch of another node while the first has %d: %v", watches, err)
		} else {
			cancel()
		}
		// The slot is freed once the curator sees the stream end.
		open[0]()
		fixture.Eventually(t, 30*time.Second, "a Watch after one ended", func() error {
			cancel, err := watch(cur, n)
			if err == nil {
				open[0] = cancel
			}
			return err
		})
		for _, cancel := range open {
			cancel()
		}
	})

	t.Run("status", func(t *testing.T) {
		ctx := fixture.Context(t)
		update := func(cur api.CuratorClient, of *testNode, st *api.NodeStatus) error {
			_, err := cur.UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: of.id(), Status: st})
			return err
		}
		valid := &api.NodeStatus{ExternalAddress: "127.0.0.1", Version: "test", RunningCurator: &api.NodeStatus_RunningCurator{Port: int32(n.addr.Port())}, TimestampUnixNanos: time.Now().UnixNano()}
		// Refused statuses use none of the node's writes.
		for _, tc := range invalidStatuses() {
			err := update(cur, n, tc.status)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("UpdateNodeStatus with %s = %v, want InvalidArgument naming %s", tc.name, err, tc.field)
			}
		}
		for i := range writes {
			if err := update(cur, n, valid); err != nil {
				t.Fatalf("UpdateNodeStatus %d of %d: %v", i+1, writes, err)
			}
		}
		if err := update(cur, n, valid); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("UpdateNodeStatus %d in a row = %v, want ResourceExhausted", writes+1, err)
		}
		if err := update(other.client(t, addr), other, valid); err != nil {
			t.Errorf("UpdateNodeStatus of another node: %v", err)
		}
	})
}

// invalidStatus is a status UpdateNodeStatus refuses, and the field its
// error names.
type invalidStatus struct {
	name   string
	status *api.NodeStatus
	field  string
}

func invalidStatuses() []invalidStatus {
	padded := &api.NodeStatus{ExternalAddress: "10.0.0.1"}
	padded.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, maxStatusSize)))
	return []invalidStatus{
		{"no status", nil, "status is missing"},
		{"unknown fields", padded, "status is"},
		{"a host name", &api.NodeStatus{ExternalAddress: "node1.example"}, "status.external_address"},
		{"an address with a port", &api.NodeStatus{ExternalAddress: "10.0.0.1:7833"}, "status.external_address"},
		{"an address with a zone", &api.NodeStatus{ExternalAddress: "fe80::1%eth0"}, "status.external_address"},
		{"the unspecified address", &api.NodeStatus{ExternalAddress: "0.0.0.0"}, "status.external_address"},
		{"a multicast address", &api.NodeStatus{ExternalAddress: "224.0.0.1"}, "status.external_address"},
		{"a long version", &api.NodeStatus{Version: strings.Repeat("v", maxVersionLength+1)}, "status.version"},
		{"a version with a newline", &api.NodeStatus{Version: "v1\nFAKE LOG LINE"}, "status.version"},
		{"a version with an escape", &api.NodeStatus{Version: "v1\x1b[2J"}, "status.version"},
		{"a version not in ASCII", &api.NodeStatus{Version: "v1é"}, "status.version"},
		{"a system slot c", &api.NodeStatus{SystemSlot: "c"}, "status.system_slot"},
		{"a system slot with a newline", &api.NodeStatus{SystemSlot: "a\nFAKE LOG LINE"}, "status.system_slot"},
		{"curator port 0", &api.NodeStatus{RunningCurator: &api.NodeStatus_RunningCurator{}}, "status.running_curator.port"},
		{"curator port 65536", &api.NodeStatus{RunningCurator: &api.NodeStatus_RunningCurator{Port: 65536}}, "status.running_curator.port"},
		{"a negative curator port", &api.NodeStatus{RunningCurator: &api.NodeStatus_RunningCurator{Port: -1}}, "status.running_curator.port"},
		{"a timestamp before 1970", &api.NodeStatus{TimestampUnixNanos: -1}, "status.timestamp_unix_nanos"},
		{"a timestamp two days ahead", &api.NodeStatus{TimestampUnixNanos: time.Now().Add(48 * time.Hour).UnixNano()}, "status.timestamp_unix_nanos"},
		{"an unknown clock state", &api.NodeStatus{Clock: &api.ClockStatus{State: 99}}, "status.clock.state"},
		{"a clock server that is a name", &api.NodeStatus{Clock: &api.ClockStatus{Server: "pool.ntp.org"}}, "status.clock.server"},
		{"a multicast clock server", &api.NodeStatus{Clock: &api.ClockStatus{Server: "224.0.1.1"}}, "status.clock.server"},
		{"a last sync before 1970", &api.NodeStatus{Clock: &api.ClockStatus{LastSyncUnixNanos: -1}}, "status.clock.last_sync_unix_nanos"},
		{"a last sync two days ahead", &api.NodeStatus{Clock: &api.ClockStatus{LastSyncUnixNanos: time.Now().Add(48 * time.Hour).UnixNano()}}, "status.clock.last_sync_unix_nanos"},
		{"a long clock reason", &api.NodeStatus{Clock: &api.ClockStatus{Reason: strings.Repeat("r", maxClockReasonLength+1)}}, "status.clock.reason"},
		{"a clock reason with a newline", &api.NodeStatus{Clock: &api.ClockStatus{Reason: "wrong\nFAKE LOG LINE"}}, "status.clock.reason"},
		{"a clock reason with an escape", &api.NodeStatus{Clock: &api.ClockStatus{Reason: "wrong\x1b[2J"}}, "status.clock.reason"},
	}
}

// TestCheckNodeStatus checks the statuses the curator stores and refuses,
// without a curator.
func TestCheckNodeStatus(t *testing.T) {
	for _, st := range []*api.NodeStatus{
		{},
		{ExternalAddress: "10.42.0.10", Version: "dev-0123456789abcdef0123456789abcdef01234567", RunningCurator: &api.NodeStatus_RunningCurator{Port: 7833}, TimestampUnixNanos: time.Now().UnixNano()},
		{ExternalAddress: "2001:db8::10", Version: "v1.2.3 (built by CI)", RunningCurator: &api.NodeStatus_RunningCurator{Port: 65535}},
		{SystemSlot: "a"},
		{SystemSlot: "b"},
		// A clock that is behind, or was never set, is the node's affair.
		{TimestampUnixNanos: 1},
		{TimestampUnixNanos: time.Now().Add(time.Hour).UnixNano()},
		{Clock: &api.ClockStatus{}},
		{Clock: &api.ClockStatus{State: api.ClockState_CLOCK_STATE_SYNCHRONIZED, Server: "10.42.0.1", OffsetNanos: -1500000, LastSyncUnixNanos: time.Now().UnixNano()}},
		{Clock: &api.ClockStatus{State: api.ClockState_CLOCK_STATE_KNOWN_WRONG, Server: "2001:db8::123", OffsetNanos: 3 * int64(time.Hour),
			Reason: "NTP server 2001:db8::123 finds it 3h0m0.000042s off, more than 1s, and stepping it failed: operation not permitted (µs)"}},
	} {
		if err := checkNodeStatus(st); err != nil {
			t.Errorf("checkNodeStatus(%v) = %v, want nil", st, err)
		}
	}
	for _, tc := range invalidStatuses() {
		err := checkNodeStatus(tc.status)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("checkNodeStatus(%s) = %v, want InvalidArgument naming %s", tc.name, err, tc.field)
		}
	}
}

// TestRegisterNodeLimits registers nodes up to the cap on nodes in state
// NEW and beyond the rate of one source, and from a second source.
func TestRegisterNodeLimits(t *testing.T) {
	const maxNew, burst = 2, 4
	c, addr, m, ticket := registerCluster(t, maxNew, burst, time.Hour)
	ctx := fixture.Context(t)
	a, b, cc, d := newTestNode(t), newTestNode(t), newTestNode(t), newTestNode(t)
	register := func(from string, n *testNode) error {
		_, err := c.ephemeralFrom(t, from, addr, n).RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)})
		return err
	}

	// From 127.0.0.1: burst calls, of which the third hits the cap.
	for _, n := range []*testNode{a, b} {
		if err := register("127.0.0.1", n); err != nil {
			t.Fatalf("RegisterNode %s: %v", n.id(), err)
		}
	}
	full := fmt.Sprintf("too many nodes wait for approval (%d); approve or delete some", maxNew)
	if err := register("127.0.0.1", cc); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), full) {
		t.Errorf("RegisterNode with %d nodes NEW = %v, want ResourceExhausted: %s", maxNew, err, full)
	}
	if err := register("127.0.0.1", a); err != nil {
		t.Errorf("RegisterNode again of a node waiting for approval, with %d NEW: %v", maxNew, err)
	}
	err := register("127.0.0.1", d)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many registrations from 127.0.0.1") {
		t.Errorf("RegisterNode %d from one source = %v, want ResourceExhausted for too many registrations", burst+1, err)
	}

	// Another source is not held back by the first one's rate; once the
	// owner approved a node, the cap has room again.
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: a.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	if err := register("127.0.0.2", cc); err != nil {
		t.Errorf("RegisterNode from another source after an approval: %v", err)
	}
	wantState(t, m, cc.id(), api.NodeState_NODE_STATE_NEW)
	if err := register("127.0.0.2", d); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), full) {
		t.Errorf("RegisterNode from another source with %d NEW = %v, want ResourceExhausted: %s", maxNew, err, full)
	}
}

// registerCluster starts a test cluster whose cap on nodes in state NEW is
// maxNew and whose register rate per source is burst calls, refilled one
// per interval. It returns the cluster, node 0's address, the owner's
// Management client there and the register ticket.
func registerCluster(t *testing.T, maxNew, burst int, interval time.Duration) (*testCluster, string, api.ManagementClient, []byte) {
	t.Helper()
	c := newTestCluster(t, WithMaxNewNodes(maxNew), withLimits(func(l *limits) {
		l.registerBurst = burst
		l.registerInterval = interval
	}))
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	res, err := m.GetRegisterTicket(fixture.Context(t), &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	return c, addr, m, res.GetTicket()
}

// ephemeralFrom is ephemeral, on a connection from the loopback address
// from, which the curator takes for another source than 127.0.0.1.
func (c *testCluster) ephemeralFrom(t testing.TB, from, addr string, n *testNode) api.CuratorClient {
	t.Helper()
	creds, err := rpc.EphemeralCredentials(c.ca, n.key)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	local := &net.TCPAddr{IP: net.ParseIP(from)}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: local}
		return d.DialContext(ctx, "tcp", addr)
	}))
	if err != nil {
		t.Fatalf("NewClient(%q): %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewCuratorClient(conn)
}

// TestKeyedRate checks the buckets of keyedRate against a clock of its
// own: each key has its burst, refills at its interval, and is forgotten
// when full again, so that the map stays bounded.
func TestKeyedRate(t *testing.T) {
	k := newKeyedRate(time.Second, 2)
	now := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false} {
		if got := k.allow("a", now); got != want {
			t.Errorf("allow(a) %d at once = %v, want %v", i+1, got, want)
		}
	}
	if !k.allow("b", now) {
		t.Error("allow(b) after a used its burst = false, want true")
	}
	if !k.allow("a", now.Add(time.Second)) {
		t.Error("allow(a) a second later = false, want true")
	}

	// Fill the map with keys that used a token just now: a new key is
	// refused until one of them has refilled.
	k = newKeyedRate(time.Second, 2)
	for i := range maxRateKeys {
		if !k.allow(fmt.Sprint(i), now) {
			t.Fatalf("allow(%d) = false, want true", i)
		}
	}
	if k.allow("new", now) {
		t.Errorf("allow(new) with %d keys in use = true, want false", maxRateKeys)
	}
	later := now.Add(2 * time.Second)
	if !k.allow("new", later) {
		t.Errorf("allow(new) once the others refilled = false, want true")
	}
	if len(k.buckets) != 1 {
		t.Errorf("%d buckets after the refilled ones were forgotten, want 1", len(k.buckets))
	}
}

// TestSourceOf checks which addresses share a RegisterNode rate.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.42.0.10", "10.42.0.10/32"},
		{"::ffff:10.42.0.10", "10.42.0.10/32"},
		{"2001:db8:1:2::10", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
	} {
		if got := sourceOf(netip.MustParseAddr(tc.addr)); got.String() != tc.want {
			t.Errorf("sourceOf(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// TestWaitingIndex follows the index of nodes in state NEW through every
// way out of NEW: it must name exactly the nodes that wait for approval,
// or the cap of RegisterNode counts nodes that no longer wait.
func TestWaitingIndex(t *testing.T) {
	c := newTestCluster(t, withLimits(func(l *limits) { l.registerInterval = 0 }))
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	res, err := m.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	approved, decommissioned, deleted, waits := newTestNode(t), newTestNode(t), newTestNode(t), newTestNode(t)
	for _, n := range []*testNode{approved, decommissioned, deleted, waits} {
		// Twice: a retried registration adds nothing.
		for range 2 {
			if _, err := c.ephemeral(t, addr, n.key).RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: res.GetTicket(), JoinKey: n.joinKey.Public().(ed25519.PublicKey)}); err != nil {
				t.Fatalf("RegisterNode %s: %v", n.id(), err)
			}
		}
	}
	etcd, err := curatorClient(c.nodes[0].member.WaitVoter(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	waiting := func() []string {
		t.Helper()
		resp, err := etcd.Get(ctx, waitingPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, kv := range resp.Kvs {
			ids = append(ids, strings.TrimPrefix(string(kv.Key), waitingPrefix))
		}
		slices.Sort(ids)
		return ids
	}
	all := []string{approved.id(), decommissioned.id(), deleted.id(), waits.id()}
	slices.Sort(all)
	if got := waiting(); !slices.Equal(got, all) {
		t.Errorf("waiting after four registrations = %v, want %v", got, all)
	}

	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: approved.id()}); err != nil {
		t.Fatalf("ApproveNode: %v", err)
	}
	if _, err := m.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: decommissioned.id()}); err != nil {
		t.Fatalf("DecommissionNode: %v", err)
	}
	if _, err := m.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: deleted.id()}); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if got := waiting(); !slices.Equal(got, []string{waits.id()}) {
		t.Errorf("waiting after an approval, a decommission and a deletion = %v, want [%s]", got, waits.id())
	}
}

// TestRegisterNodeCapConcurrent: nodes that register all at once, more
// than the cap on nodes in state NEW allows, fill it exactly. Far below
// the cap the writes do not compare the waiting index, and near it they
// do (roomForNew), so the cap holds whichever way the calls interleave.
func TestRegisterNodeCapConcurrent(t *testing.T) {
	const maxNew, nodes = 2*registerInFlight + 20, 2*registerInFlight + 60
	c, addr, m, ticket := registerCluster(t, maxNew, 10*nodes, time.Millisecond)
	ctx := fixture.Context(t)
	var registered, full atomic.Int32
	var wg sync.WaitGroup
	for range nodes {
		n := newTestNode(t)
		cur := c.ephemeralFrom(t, "127.0.0.1", addr, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{RegisterTicket: ticket, JoinKey: n.joinKey.Public().(ed25519.PublicKey)})
				switch status.Code(err) {
				case codes.OK:
					registered.Add(1)
				case codes.ResourceExhausted:
					full.Add(1)
				case codes.Aborted:
					continue // the caller's retry
				default:
					t.Errorf("RegisterNode: %v", err)
				}
				return
			}
		}()
	}
	wg.Wait()
	if registered.Load() != maxNew || full.Load() != nodes-maxNew {
		t.Errorf("%d nodes registered and %d were refused, want %d and %d", registered.Load(), full.Load(), maxNew, nodes-maxNew)
	}
	list, err := m.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	waiting := 0
	for _, n := range list.GetNodes() {
		if n.State == api.NodeState_NODE_STATE_NEW {
			waiting++
		}
	}
	if waiting != maxNew {
		t.Errorf("%d nodes are NEW, want the cap, %d", waiting, maxNew)
	}
}
