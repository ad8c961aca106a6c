package roleserve

import (
	"context"
	"crypto/ed25519"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// testNode is one node's role server in the test process, with storage
// under a temporary directory and an IP of its own on loopback.
type testNode struct {
	key        ed25519.PrivateKey
	ip         netip.Addr
	cfg        Config
	membership memory.Value[*Membership]
	address    memory.Value[netip.Prefix]
	clock      memory.Value[timesync.State]
	system     memory.Value[*localstorage.BootedSystem]
	svc        *Service
	lt         *logtree.LogTree
	stop       func()
}

// newTestNode prepares a node on 127.0.0.1 whose curator serves on
// curatorPort, whose etcd peers on peerPort, and which dials the curators
// of its cluster directory on directoryPort. Its curator tells joining
// nodes to peer on joinPeerPort.
//
// All nodes share 127.0.0.1: etcd checks a peer's source address against
// the IP of its certificate, and loopback connections leave from 127.0.0.1
// whatever 127/8 address they go to.
func newTestNode(t testing.TB, curatorPort, peerPort, joinPeerPort, directoryPort int) *testNode {
	t.Helper()
	st, err := localstorage.New(localstorage.Config{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		st.Root.Data.Node.MkdirAll(0o700),
		st.Root.Data.Etcd.MkdirAll(0o700),
		st.Root.ESP.Cairn.MkdirAll(0o700),
		st.Root.Ephemeral.MkdirAll(0o700),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := &testNode{key: identitytest.NewKey(t), ip: netip.MustParseAddr("127.0.0.1")}
	n.address.Set(netip.PrefixFrom(n.ip, 8))
	n.clock.Set(testClock)
	n.system.Set(&localstorage.BootedSystem{Slot: localstorage.SlotB})
	n.cfg = Config{
		Membership:      &n.membership,
		ExternalAddress: &n.address,
		Clock:           &n.clock,
		System:          &n.system,
		Storage:         st,
		Version:         "test",
		Ports:           ports.Table{Curator: curatorPort, EtcdPeer: peerPort},
		clusterPorts:    ports.Table{Curator: directoryPort, EtcdPeer: joinPeerPort},
		curatorOptions:  []curator.Option{curator.WithElectionTTL(curatortest.ElectionTTL)},
	}
	return n
}

// testClock is the clock state of every test node.
var testClock = timesync.State{
	Sync:     timesync.Synchronized,
	Server:   netip.MustParseAddr("127.0.0.123"),
	Offset:   1500 * time.Microsecond,
	LastSync: time.Unix(1795000000, 0),
}

func (n *testNode) id() string { return identity.NodeID(n.key.Public().(ed25519.PublicKey)) }

func (n *testNode) curatorAddr() string {
	return netip.AddrPortFrom(n.ip, uint16(n.cfg.Ports.Curator)).String()
}

// start runs the node's role server until the test ends or stop.
func (n *testNode) start(t testing.TB) {
	t.Helper()
	n.svc = New(n.cfg)
	n.lt = logtree.New()
	n.stop = consensustest.RunTree(t, n.id()[:12]+" ", n.svc.Run, n.lt, logtree.INFO)
	t.Cleanup(n.stop)
}

// waitMarker waits for the node to state a marker of name whose fields
// hold kv (pairs of key and value), and returns when it was logged.
func (n *testNode) waitMarker(t testing.TB, name marker.Name, timeout time.Duration, kv ...string) time.Time {
	t.Helper()
	r, err := n.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.WithStream())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	matches := func(e *logtree.LogEntry) bool {
		m, ok := marker.Parse(e.Message)
		return ok && m.Is(name, kv...)
	}
	for _, e := range r.Backlog {
		if matches(e) {
			return e.Time
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case e := <-r.Stream:
			if matches(e) {
				return e.Time
			}
		case <-deadline:
			t.Fatalf("%s: no marker %s %q within %v", n.id(), name, kv, timeout)
		}
	}
}

// owner is the cluster owner of a test: its key, and the certificate the
// bootstrap issued for it.
type owner struct {
	key ed25519.PrivateKey

	mu           sync.Mutex
	cert, caCert []byte
}

// bootstrap returns the bootstrap data of a cluster that node n creates
// for o, and sets n's afterBootstrap to issue o's owner certificate
// straight from the new cluster's CA. Call it before n starts.
func (o *owner) bootstrap(n *testNode) *Bootstrap {
	n.cfg.afterBootstrap = func(ctx context.Context, etcd *consensus.Client) error {
		ownerDER, err := curatortest.IssueOwnerCertificate(ctx, etcd, o.key.Public().(ed25519.PublicKey))
		if err != nil {
			return err
		}
		_, caDER, err := curator.IssueNodeCertificate(ctx, etcd, n.key.Public().(ed25519.PublicKey))
		if err != nil {
			return err
		}
		o.mu.Lock()
		o.cert, o.caCert = ownerDER, caDER
		o.mu.Unlock()
		return nil
	}
	pub := n.key.Public().(ed25519.PublicKey)
	return &Bootstrap{
		OwnerPublicKey: o.key.Public().(ed25519.PublicKey),
		Configuration: &api.ClusterConfiguration{
			StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE,
			TpmMode:               api.TPMMode_TPM_MODE_DISABLED,
		},
		JoinPublicKey:   pub,
		ExternalAddress: n.ip,
	}
}

// dial returns an owner's connection to the curator at addr.
func (o *owner) dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	creds, err := rpc.OwnerCredentials(o.key, o.cert, o.caCert)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// runWorker runs one worker's run under a supervisor of its own until the
// test ends.
func runWorker(t testing.TB, run supervisor.Runnable) {
	t.Helper()
	t.Cleanup(consensustest.RunTree(t, "", run, logtree.New(), logtree.INFO))
}

// fakeCurator serves srv as the curator on a loopback port, without TLS,
// and returns a connection to it as the connection worker would publish
// it (with no resolver), until the test ends.
func fakeCurator(t testing.TB, srv api.CuratorServer) *curatorConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	api.RegisterCuratorServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &curatorConn{conn: conn}
}
