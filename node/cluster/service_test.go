package cluster

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
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
// own (or none) and the Values enrolment reads and writes.
type testNode struct {
	storage    *fakeStorage
	tpm        func() (sealer, error)
	address    memory.Value[netip.Prefix]
	membership *memory.Value[*roleserve.Membership]
	lt         *logtree.LogTree
	cancel     context.CancelFunc
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	n := &testNode{storage: newFakeStorage(t), tpm: newFakeTPM().open}
	n.address.Set(netip.MustParsePrefix("127.0.0.1/8"))
	return n
}

// boot runs enrolment as on a fresh boot: the data partition unmounted,
// a new Membership value.
func (n *testNode) boot(t *testing.T, params *api.NodeParameters, port int) {
	t.Helper()
	if n.cancel != nil {
		n.cancel()
	}
	n.storage.reboot()
	n.membership = &memory.Value[*roleserve.Membership]{}
	tm := fastTiming
	svc := New(Config{
		Storage:         n.storage.st,
		ExternalAddress: &n.address,
		Membership:      n.membership,
		Parameters:      params,
		storage:         n.storage,
		openTPM:         n.tpm,
		curatorPort:     port,
		timing:          &tm,
	})
	n.cancel, n.lt = supervisor.TestHarness(t, svc.Run)
}

// waitMembership waits for enrolment to publish the node's Membership.
func (n *testNode) waitMembership(t *testing.T) *roleserve.Membership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := n.membership.Watch()
	defer w.Close()
	m, err := w.Get(ctx)
	if err != nil {
		t.Fatalf("waiting for the membership: %v", err)
	}
	return m
}

// waitLog waits for a log line starting with prefix, at severity or
// above, and returns it.
func (n *testNode) waitLog(t *testing.T, prefix string, severity logtree.Severity) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		r, err := n.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.WithMinimumSeverity(severity))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Backlog {
			if strings.HasPrefix(e.Message, prefix) {
				r.Close()
				return e.Message
			}
		}
		r.Close()
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no log line %q", prefix)
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

// runConsensus starts a real etcd member on the node's data directory,
// as the role server's controlplane worker does, and returns its Status
// once running. It stops when the test ends, or with the returned cancel,
// which waits for it.
func runConsensus(t *testing.T, n *testNode, m *roleserve.Membership, name string) (*consensus.Status, context.CancelFunc) {
	t.Helper()
	member := consensustest.NewMember(t, m.NodeKey)
	member.Config.Name = name
	member.Config.DataDir = n.storage.st.Root.Data.Etcd.FullPath()
	member.Start(t)
	return member.WaitVoter(t), member.Stop
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func withConfiguration(p *api.NodeParameters, c *api.ClusterConfiguration) *api.NodeParameters {
	p = proto.Clone(p).(*api.NodeParameters)
	p.GetClusterBootstrap().InitialClusterConfiguration = c
	return p
}
