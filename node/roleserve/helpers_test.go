package roleserve

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/consensus/consensustest"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
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
	n.cfg = Config{
		Membership:      &n.membership,
		ExternalAddress: &n.address,
		Storage:         st,
		Version:         "test",
		curatorPort:     curatorPort,
		peerPort:        peerPort,
		joinPeerPort:    joinPeerPort,
		directoryPort:   directoryPort,
	}
	return n
}

func (n *testNode) id() string { return identity.NodeID(n.key.Public().(ed25519.PublicKey)) }

func (n *testNode) curatorAddr() string {
	return netip.AddrPortFrom(n.ip, uint16(n.cfg.curatorPort)).String()
}

// start runs the node's role server until the test ends or stop.
func (n *testNode) start(t testing.TB) {
	t.Helper()
	n.svc = New(n.cfg)
	n.lt = logtree.New()
	n.stop = consensustest.RunTree(t, n.id()[:12]+" ", n.svc.Run, n.lt, logtree.INFO)
	t.Cleanup(n.stop)
}

// waitLog waits for a log entry of the node whose message starts with
// prefix, and returns when it was logged.
func (n *testNode) waitLog(t testing.TB, prefix string, timeout time.Duration) time.Time {
	t.Helper()
	r, err := n.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.WithStream())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, e := range r.Backlog {
		if strings.HasPrefix(e.Message, prefix) {
			return e.Time
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case e := <-r.Stream:
			if strings.HasPrefix(e.Message, prefix) {
				return e.Time
			}
		case <-deadline:
			t.Fatalf("%s: no log line %q within %v", n.id(), prefix, timeout)
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

// bootstrap returns a Membership.Bootstrap for node n that writes the
// cluster's initial state, issues n's certificate, and issues o's owner
// certificate straight from the cluster CA.
func (o *owner) bootstrap(n *testNode) func(ctx context.Context, etcd *consensus.Client) (*identity.Node, error) {
	return func(ctx context.Context, etcd *consensus.Client) (*identity.Node, error) {
		pub := n.key.Public().(ed25519.PublicKey)
		err := curator.Bootstrap(ctx, etcd, curator.BootstrapState{
			OwnerPublicKey: o.key.Public().(ed25519.PublicKey),
			Configuration: &api.ClusterConfiguration{
				StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE,
				TpmMode:               api.TPMMode_TPM_MODE_DISABLED,
			},
			NodePublicKey: pub,
			JoinPublicKey: pub,
		})
		if err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		certDER, caDER, err := curator.IssueNodeCertificate(ctx, etcd, pub)
		if err != nil {
			return nil, fmt.Errorf("node certificate: %w", err)
		}
		ownerDER, err := curatortest.IssueOwnerCertificate(ctx, etcd, o.key.Public().(ed25519.PublicKey))
		if err != nil {
			return nil, err
		}
		o.mu.Lock()
		o.cert, o.caCert = ownerDER, caDER
		o.mu.Unlock()
		return identity.NewNode(n.key, certDER, caDER)
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

// eventually calls f until it returns nil, or fails the test with its last
// error after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
