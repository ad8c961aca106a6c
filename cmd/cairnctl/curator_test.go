package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// realCluster is a one-node control plane in the test process: an
// embedded etcd member (consensus.Service) and a curator on loopback,
// bootstrapped for the owner key of a cairnctl configuration directory.
type realCluster struct {
	addr  string
	node  *identity.Node
	caDER []byte
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startRealCluster(t *testing.T, owner ed25519.PublicKey) *realCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	nodeKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nodePub := nodeKey.Public().(ed25519.PublicKey)
	tmp := t.TempDir()
	svc := consensus.New(consensus.Config{
		Name:       identity.NodeID(nodePub),
		DataDir:    filepath.Join(tmp, "etcd"),
		SocketPath: filepath.Join(tmp, "etcd.sock"),
		PeerIP:     net.IPv4(127, 0, 0, 1),
		PeerPort:   freePort(t),
		PrivateKey: nodeKey,
	})
	supervisor.TestHarness(t, svc.Run)
	w := svc.Status().Watch()
	defer w.Close()
	st, err := w.Get(ctx, event.Filter(func(s *consensus.Status) bool { return s != nil && s.Running && !s.Learner }))
	if err != nil {
		t.Fatalf("waiting for consensus: %v", err)
	}
	etcd := st.Client()

	certDER, caDER, err := curator.IssueNodeCertificate(ctx, etcd, nodePub)
	if err != nil {
		t.Fatalf("IssueNodeCertificate: %v", err)
	}
	node, err := identity.NewNode(nodeKey, certDER, caDER)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	joinPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	unlock := make([]byte, localstorage.KeySize)
	rand.Read(unlock)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	advertise := lis.Addr().(*net.TCPAddr).AddrPort()
	err = curator.Bootstrap(ctx, etcd, curator.BootstrapState{
		OwnerPublicKey: owner,
		Configuration: &api.ClusterConfiguration{
			StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED,
			TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
		},
		NodePublicKey:    nodePub,
		JoinPublicKey:    joinPub,
		ClusterUnlockKey: unlock,
		Status: &api.NodeStatus{
			ExternalAddress: "127.0.0.1",
			RunningCurator:  &api.NodeStatus_RunningCurator{Port: int32(advertise.Port())},
			Version:         "test",
		},
	})
	if err != nil {
		t.Fatalf("curator.Bootstrap: %v", err)
	}
	cur := curator.New(curator.Config{
		Node:      node,
		Consensus: st,
		Advertise: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), advertise.Port()),
		Listener:  lis,
	})
	supervisor.TestHarness(t, cur.Run)
	return &realCluster{addr: lis.Addr().String(), node: node, caDER: caDER}
}

// eventually runs cairnctl until it succeeds: the curator answers
// Management only once it has won its election.
func eventually(t *testing.T, dir string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := run(t, dir, args...)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("cairnctl %s: %v", strings.Join(args, " "), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAgainstCurator runs cairnctl against a real curator: takeownership,
// node list, params register, approving a node that registered with the
// ticket cairnctl wrote, and adding a role.
func TestAgainstCurator(t *testing.T) {
	dir := t.TempDir()
	mustRun(t, dir, "params", "bootstrap", "--out", filepath.Join(dir, "bootstrap.pb"))
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := startRealCluster(t, key.Public().(ed25519.PublicKey))
	t.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	out := mustRun(t, dir, "--endpoint", c.addr, "takeownership")
	t.Logf("takeownership in %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "(node "+c.node.ID()+")") {
		t.Errorf("takeownership printed %q, want it to name node %s", out, c.node.ID())
	}

	start = time.Now()
	var views []nodeView
	if err := json.Unmarshal([]byte(eventually(t, dir, "node", "list", "-o", "json")), &views); err != nil {
		t.Fatalf("node list -o json: %v", err)
	}
	t.Logf("first node list in %s", time.Since(start).Round(time.Millisecond))
	if len(views) != 1 || views[0].ID != c.node.ID() || views[0].State != "UP" ||
		len(views[0].Roles) != 1 || views[0].Roles[0] != roleConsensusMember {
		t.Fatalf("node list -o json = %+v, want %s UP with ConsensusMember", views, c.node.ID())
	}

	paramsFile := filepath.Join(dir, "register.pb")
	mustRun(t, dir, "params", "register", "--out", paramsFile)
	data, err := os.ReadFile(paramsFile)
	if err != nil {
		t.Fatal(err)
	}
	reg := readParams(t, data).GetClusterRegister()
	if len(reg.GetRegisterTicket()) == 0 || !sameDER(reg.GetCaCertificate(), c.caDER) ||
		len(reg.GetClusterDirectory().GetNodes()) != 1 || reg.GetClusterDirectory().GetNodes()[0].GetId() != c.node.ID() {
		t.Fatalf("register parameters = %v, want the ticket, the CA and this node in the directory", reg)
	}

	// A new node registers with what cairnctl wrote, as enrolment would.
	newKey, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	newID := identity.NodeID(newKey.Public().(ed25519.PublicKey))
	creds, err := rpc.EphemeralCredentials(reg.GetCaCertificate(), newKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	joinPub, _, _ := ed25519.GenerateKey(rand.Reader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.NewCuratorClient(conn).RegisterNode(ctx, &api.RegisterNodeRequest{
		RegisterTicket: reg.GetRegisterTicket(), JoinKey: joinPub,
	}); err != nil {
		t.Fatalf("RegisterNode with the ticket from params register: %v", err)
	}

	describe := func(id string) nodeView {
		t.Helper()
		var v nodeView
		if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "node", "describe", id)), &v); err != nil {
			t.Fatalf("node describe -o json: %v", err)
		}
		return v
	}
	if v := describe(newID); v.State != "NEW" {
		t.Errorf("registered node is %s, want NEW", v.State)
	}
	mustRun(t, dir, "node", "approve", newID)
	if v := describe(newID); v.State != "STANDBY" {
		t.Errorf("approved node is %s, want STANDBY", v.State)
	}
	out = mustRun(t, dir, "node", "add-role", c.node.ID(), "KubernetesWorker")
	if !strings.Contains(out, "ConsensusMember, KubernetesWorker") {
		t.Errorf("node add-role printed %q, want both roles", out)
	}
	if _, err := run(t, dir, "node", "delete", c.node.ID()); err == nil || !strings.Contains(err.Error(), "refused in this state") {
		t.Errorf("deleting an UP node = %v, want FailedPrecondition explained", err)
	}
	var info clusterView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "info")), &info); err != nil {
		t.Fatalf("cluster info -o json: %v", err)
	}
	if info.CAFingerprint != fingerprint(c.caDER) || info.TPM != "best-effort" {
		t.Errorf("cluster info = %+v, want the cluster's CA and TPM best-effort", info)
	}
}
