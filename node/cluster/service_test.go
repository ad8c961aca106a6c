package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// fastTiming keeps tests short.
var fastTiming = timing{
	retryMin:       50 * time.Millisecond,
	retryMax:       500 * time.Millisecond,
	refusedRetry:   500 * time.Millisecond,
	callTimeout:    2 * time.Second,
	approvalPoll:   100 * time.Millisecond,
	approvalReport: 500 * time.Millisecond,
	coldStartAfter: 2 * time.Second,
}

// testNode is one simulated node for enrolment: fake disks, a TPM of its
// own (or none), the values enrolment reads and writes, and the real role
// server on them, as cmd/init wires it, so that what enrolment hands over
// is used as on a node (etcd, the curator, the cluster directory).
type testNode struct {
	storage    *fakeStorage
	tpm        func() (sealer, error)
	binding    *tpmseal.Binding
	address    memory.Value[netip.Prefix]
	membership *memory.Value[*roleserve.Membership]
	params     *memory.Value[*parameters.Loaded]
	// dataModules, when set before boot, is the boot's Config.DataModules.
	dataModules *memory.Value[bool]
	lt          *logtree.LogTree
	cancel      context.CancelFunc
	// curatorPort is where the cluster's curators serve: this node's own
	// when it bootstrapped. peerPort is its etcd's, the same every boot.
	curatorPort, peerPort int
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	n := &testNode{storage: newFakeStorage(t), tpm: newFakeTPM().open}
	n.address.Set(netip.MustParsePrefix("127.0.0.1/8"))
	return n
}

// boot runs enrolment and the role server as on a fresh boot: the data
// partition unmounted, new values. params nil means those on the ESP. The
// node dials curators on curatorPort; 0 picks a free port, where a node
// that bootstraps serves its curator.
func (n *testNode) boot(t *testing.T, params *api.NodeParameters, curatorPort int) {
	t.Helper()
	if n.cancel != nil {
		n.cancel()
	}
	n.storage.reboot()
	if curatorPort == 0 {
		curatorPort = fixture.FreePort(t)
	}
	n.curatorPort = curatorPort
	n.membership = &memory.Value[*roleserve.Membership]{}
	n.params = &memory.Value[*parameters.Loaded]{}
	if params != nil {
		n.params.Set(&parameters.Loaded{Parameters: params})
	} else {
		n.params.Set(parameters.Load("", n.storage.st.Root.ESP.Cairn.Parameters.FullPath()))
	}
	if n.peerPort == 0 {
		n.peerPort = fixture.FreePort(t)
	}
	p := ports.Table{Curator: curatorPort, EtcdPeer: n.peerPort}
	rs := roleserve.New(roleserve.Config{
		Membership:      n.membership,
		ExternalAddress: &n.address,
		Storage:         n.storage.st,
		Version:         "test",
		Ports:           p,
	})
	tm := fastTiming
	svc := New(Config{
		Storage:         n.storage.st,
		ExternalAddress: &n.address,
		Parameters:      n.params,
		Membership:      n.membership,
		Credentials:     rs.Credentials(),
		StoredDirectory: rs.StoredDirectory(),
		Ports:           p,
		storage:         n.storage,
		openTPM:         n.tpm,
		Binding:         n.binding,
		timing:          &tm,
	})
	if n.dataModules != nil {
		svc.cfg.DataModules = n.dataModules
	}
	n.cancel, n.lt = supervisortest.Harness(t, func(ctx context.Context) error {
		for name, r := range map[string]supervisor.Runnable{"enrolment": svc.Run, "roleserve": rs.Run} {
			if err := supervisor.Run(ctx, name, r); err != nil {
				return err
			}
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	})
}

// curatorTarget is host:port of the curator the node dials.
func (n *testNode) curatorTarget() string {
	return ports.Join("127.0.0.1", n.curatorPort)
}

// waitMembership waits for enrolment to publish the node's Membership.
func (n *testNode) waitMembership(t *testing.T) *roleserve.Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := event.Get(ctx, n.membership)
	if err != nil {
		t.Fatalf("waiting for the membership: %v", err)
	}
	return m
}

// waitLog waits for a log entry at severity or above whose message starts
// with prefix, and returns its message. Tests wait on markers (waitMarker)
// where the node states a fact; waitLog is for errors and warnings.
func (n *testNode) waitLog(t *testing.T, prefix string, severity logtree.Severity) string {
	t.Helper()
	return n.waitEntry(t, fmt.Sprintf("log line %q", prefix), severity, func(msg string) bool {
		return strings.HasPrefix(msg, prefix)
	})
}

// waitMarker waits for a marker of name whose fields hold kv (pairs of
// key and value), and returns it.
func (n *testNode) waitMarker(t *testing.T, name marker.Name, kv ...string) marker.Marker {
	t.Helper()
	var found marker.Marker
	n.waitEntry(t, fmt.Sprintf("marker %s %q", name, kv), logtree.INFO, func(msg string) bool {
		m, ok := marker.Parse(msg)
		if !ok || !m.Is(name, kv...) {
			return false
		}
		found = m
		return true
	})
	return found
}

// waitEntry waits for a log entry at severity or above whose message
// match accepts, and returns the message.
func (n *testNode) waitEntry(t *testing.T, what string, severity logtree.Severity, match func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		r, err := n.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.WithMinimumSeverity(severity))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Backlog {
			if match(e.Message) {
				r.Close()
				return e.Message
			}
		}
		r.Close()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s", what)
	return ""
}

// sealedConfiguration reads back what enrolment sealed onto the ESP.
func (n *testNode) sealedConfiguration(t *testing.T) *private.SealedConfiguration {
	t.Helper()
	b, err := n.storage.st.Root.ESP.Cairn.SealedConfiguration.Read()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := unseal(b, n.tpm)
	if err != nil {
		t.Fatalf("unsealing what enrolment wrote: %v", err)
	}
	return sc
}

func withConfiguration(p *api.NodeParameters, c *api.ClusterConfiguration) *api.NodeParameters {
	p = proto.Clone(p).(*api.NodeParameters)
	p.GetClusterBootstrap().InitialClusterConfiguration = c
	return p
}
