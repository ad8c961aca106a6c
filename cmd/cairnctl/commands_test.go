package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// testNode makes a node record with a fresh key.
func testNode(t *testing.T, state api.NodeState, roles *api.NodeRoles, status *api.NodeStatus, heartbeat time.Time) *api.Node {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return nodeRecord(pub, state, roles, status, heartbeat)
}

// nodeRecord makes the record of the node holding pub.
func nodeRecord(pub ed25519.PublicKey, state api.NodeState, roles *api.NodeRoles, status *api.NodeStatus, heartbeat time.Time) *api.Node {
	n := &api.Node{Id: identity.NodeID(pub), PublicKey: pub, State: state, Roles: roles, Status: status}
	if !heartbeat.IsZero() {
		n.LastHeartbeatUnixNanos = heartbeat.UnixNano()
	}
	return n
}

// TestCommandsAgainstServer takes ownership of a test server and runs
// every command against it over real gRPC with node/rpc's authorization.
func TestCommandsAgainstServer(t *testing.T) {
	dir, s := bootstrapped(t)
	// The UP node is the one the server answers as, so that per-node
	// calls reach the node they name.
	up := nodeRecord(s.ident.PublicKey(), api.NodeState_NODE_STATE_UP,
		&api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		&api.NodeStatus{ExternalAddress: "10.0.2.15", RunningCurator: &api.NodeStatus_RunningCurator{Port: 7833},
			Version: "v0.1", SystemSlot: "b", TimestampUnixNanos: testNow.Add(-time.Minute).UnixNano()},
		testNow.Add(-3*time.Second))
	up.Health = api.NodeHealth_NODE_HEALTH_HEALTHY
	fresh := testNode(t, api.NodeState_NODE_STATE_NEW, nil, nil, time.Time{})
	s.setNodes(up, fresh)

	out := mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	if !strings.Contains(out, "Took ownership of the cluster through "+s.addr) {
		t.Errorf("takeownership printed %q, want it to name %s", out, s.addr)
	}
	ca, err := readCertificate(dir, caCertFile)
	if err != nil || !sameDER(ca, s.ca.DER()) {
		t.Fatalf("stored CA = %x, %v, want the cluster's", ca, err)
	}
	st, err := readSettings(dir)
	if err != nil || len(st.Endpoints) != 1 || st.Endpoints[0] != s.addr {
		t.Errorf("stored endpoints = %v, %v, want [%s]", st, err, s.addr)
	}

	// From here on, the stored endpoint is used.
	out = mustRun(t, dir, "node", "list")
	// The server's order is kept (the curator sorts by ID).
	wantTable := "ID                      STATE  HEALTH   ROLES            ADDRESS    VERSION  HEARTBEAT\n" +
		up.Id + "  UP     HEALTHY  ConsensusMember  10.0.2.15  v0.1     3s ago\n" +
		fresh.Id + "  NEW    -        -                -          -        never\n"
	if out != wantTable {
		t.Errorf("node list =\n%s\nwant\n%s", out, wantTable)
	}

	var views []nodeView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "node", "list", "-o", "json")), &views); err != nil {
		t.Fatalf("node list -o json: %v", err)
	}
	hb := testNow.Add(-3 * time.Second)
	stTime := testNow.Add(-time.Minute)
	wantViews := []nodeView{{
		ID: up.Id, PublicKey: hex.EncodeToString(up.PublicKey), State: "UP", Roles: []string{"ConsensusMember"},
		Address: "10.0.2.15", CuratorPort: 7833, Version: "v0.1", SystemSlot: "b", StatusTime: &stTime, Health: "HEALTHY", LastHeartbeat: &hb,
		Seal: "plain",
	}, {
		ID: fresh.Id, PublicKey: hex.EncodeToString(fresh.PublicKey), State: "NEW", Roles: []string{},
	}}
	if diff := cmp.Diff(wantViews, views); diff != "" {
		t.Errorf("node list -o json (-want +got):\n%s", diff)
	}

	var one nodeView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "node", "describe", fresh.Id)), &one); err != nil {
		t.Fatalf("node describe -o json: %v", err)
	}
	if diff := cmp.Diff(wantViews[1], one); diff != "" {
		t.Errorf("node describe -o json (-want +got):\n%s", diff)
	}
	out = mustRun(t, dir, "node", "describe", up.Id)
	for _, want := range []string{"State:           UP", "Health:          HEALTHY", "Curator:         yes, port 7833", "System slot:     b", "Last heartbeat:  " + hb.Format(time.RFC3339) + " (3s ago)"} {
		if !strings.Contains(out, want) {
			t.Errorf("node describe printed\n%s\nwant a line with %q", out, want)
		}
	}

	mustRun(t, dir, "node", "approve", fresh.Id)
	if _, err := run(t, dir, "node", "approve", fresh.Id); err == nil || !strings.Contains(err.Error(), "refused in this state") {
		t.Errorf("approving a STANDBY node on the test server = %v, want FailedPrecondition explained", err)
	}
	if _, err := run(t, dir, "node", "describe", "cairn-0000000000000000"); err == nil || !strings.Contains(err.Error(), "no node cairn-0000000000000000") {
		t.Errorf("describing an unknown node = %v, want an error naming it", err)
	}
	out = mustRun(t, dir, "node", "add-role", up.Id, "kubernetesworker")
	if want := "Node " + up.Id + " now has roles: ConsensusMember, KubernetesWorker.\n"; out != want {
		t.Errorf("node add-role printed %q, want %q", out, want)
	}
	s.mu.Lock()
	state := s.nodes[1].State
	s.mu.Unlock()
	if state != api.NodeState_NODE_STATE_STANDBY {
		t.Errorf("after node approve, node is %v, want STANDBY", state)
	}

	var info clusterView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "cluster", "info", "-o", "json")), &info); err != nil {
		t.Fatalf("cluster info -o json: %v", err)
	}
	wantInfo := clusterView{
		CAFingerprint: fingerprint(s.ca.DER()), StorageSecurity: "encrypted", TPM: "best-effort", SecureBoot: "optional",
		Directory:   []directoryEntry{{ID: up.Id, Addresses: []string{"10.0.2.15"}}},
		Registries:  registriesView{Mirrors: map[string][]string{}, PlainHTTP: []string{}},
		ReleaseKeys: []releaseKeyView{},
	}
	if diff := cmp.Diff(wantInfo, info); diff != "" {
		t.Errorf("cluster info -o json (-want +got):\n%s", diff)
	}

	paramsFile := filepath.Join(t.TempDir(), "register.pb")
	mustRun(t, dir, "params", "register", "--out", paramsFile)
	data, err := os.ReadFile(paramsFile)
	if err != nil {
		t.Fatal(err)
	}
	wantParams := &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{ClusterRegister: &api.NodeParameters_ClusterRegister{
		RegisterTicket: []byte("ticket"),
		ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id: up.Id, PublicKey: up.PublicKey, Addresses: []*api.ClusterDirectory_Node_Address{{Host: "10.0.2.15"}},
		}}},
		CaCertificate: s.ca.DER(),
	}}}
	if diff := cmp.Diff(wantParams, readParams(t, data), protocmp.Transform()); diff != "" {
		t.Errorf("register parameters (-want +got):\n%s", diff)
	}

	entryTime := time.Date(2026, 11, 23, 10, 27, 0, 123456000, time.Local)
	s.mu.Lock()
	s.logs = []*api.LogEntry{
		{TimeUnixNanos: entryTime.UnixNano(), Dn: "root.cluster", Severity: api.LogSeverity_LOG_SEVERITY_INFO, File: "enrol.go", Line: 42, Message: "enrolment: committed"},
		{TimeUnixNanos: entryTime.UnixNano(), Dn: "root.cluster.tool", Severity: api.LogSeverity_LOG_SEVERITY_INFO, Message: "raw line", Raw: true},
	}
	s.mu.Unlock()
	out = mustRun(t, dir, "logs", up.Id, "--node-endpoint", up.Id+"="+s.addr, "--dn", "root.cluster", "--backlog", "10", "--min-severity", "W")
	wantLogs := "I1123 10:27:00.123456 root.cluster enrol.go:42] enrolment: committed\n" +
		"R1123 10:27:00.123456 root.cluster.tool] raw line\n"
	if out != wantLogs {
		t.Errorf("logs printed\n%s\nwant\n%s", out, wantLogs)
	}
	wantReq := &api.LogsRequest{Dn: "root.cluster", WithChildren: true, Backlog: 10, MinimumSeverity: api.LogSeverity_LOG_SEVERITY_WARNING}
	s.mu.Lock()
	gotReq := s.lastLogs
	s.mu.Unlock()
	if diff := cmp.Diff(wantReq, gotReq, protocmp.Transform()); diff != "" {
		t.Errorf("LogsRequest of cairnctl logs (-want +got):\n%s", diff)
	}
	mustRun(t, dir, "logs", up.Id, "--node-endpoint", up.Id+"="+s.addr, "--boot", "-1")
	s.mu.Lock()
	gotBoot := s.lastLogs.GetBoot()
	s.mu.Unlock()
	if gotBoot != -1 {
		t.Errorf("cairnctl logs --boot -1 asked for boot %d", gotBoot)
	}
	for _, args := range [][]string{{"--boot", "1"}, {"--boot", "-1", "-f"}} {
		if _, err := run(t, dir, append([]string{"logs", up.Id, "--node-endpoint", up.Id + "=" + s.addr}, args...)...); err == nil || !strings.Contains(err.Error(), "--boot") {
			t.Errorf("cairnctl logs %q = %v, want refused", args, err)
		}
	}

	// -f keeps the stream open until interrupted, which ends it without
	// an error.
	var follow fixture.SyncBuffer
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runTo(fctx, &follow, dir, "logs", "-f", up.Id, "--node-endpoint", up.Id+"="+s.addr) }()
	for !strings.Contains(follow.String(), "raw line") {
		select {
		case err := <-done:
			t.Fatalf("logs -f ended by itself: %v; printed %q", err, follow.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("logs -f interrupted = %v, want nil", err)
	}

	// The node's own address (10.0.2.15:7835) is not reachable from the
	// test; a stored node endpoint replaces it.
	mustRun(t, dir, "config", "set-node-endpoint", up.Id+"="+s.addr)
	if out := mustRun(t, dir, "node", "reboot", up.Id); out != "Rebooting node "+up.Id+".\n" {
		t.Errorf("node reboot printed %q", out)
	}
	s.mu.Lock()
	reboots := s.reboots
	s.mu.Unlock()
	if reboots != 1 {
		t.Errorf("after node reboot the node saw %d reboots, want 1", reboots)
	}
	if _, err := run(t, dir, "node", "poweroff", up.Id); err == nil || !strings.Contains(err.Error(), "does not serve this call") {
		t.Errorf("node poweroff on a server without it = %v, want Unimplemented explained", err)
	}

	// An unreachable endpoint is skipped, and only unreachable ones fail
	// clearly. So is one that takes connections into its backlog and
	// never answers (failover_test.go has more).
	dead := "127.0.0.1:1"
	mustRun(t, dir, "--endpoint", dead, "--endpoint", s.addr, "node", "list")
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	mustRun(t, dir, "--endpoint", mute.Addr().String(), "--endpoint", s.addr, "node", "list")
	if _, err := run(t, dir, "--endpoint", dead, "node", "list"); err == nil || !strings.Contains(err.Error(), "cannot reach "+dead) {
		t.Errorf("node list with an unreachable endpoint = %v, want it to say it cannot reach %s", err, dead)
	}
}

func TestTakeOwnershipRefusals(t *testing.T) {
	t.Run("foreign CA", func(t *testing.T) {
		dir, s := bootstrapped(t)
		s.escrowCA = identitytest.NewCA(t, "test cluster CA")
		_, err := run(t, dir, "--endpoint", s.addr, "takeownership")
		if err == nil || !strings.Contains(err.Error(), "not a node of the cluster whose CA it returned") {
			t.Errorf("takeownership from a server of another CA = %v, want a refusal", err)
		}
		if _, err := os.Stat(filepath.Join(dir, ownerCertFile)); !os.IsNotExist(err) {
			t.Errorf("after a refused takeownership the owner certificate exists (%v), want nothing stored", err)
		}
	})
	t.Run("not the owner", func(t *testing.T) {
		dir, s := bootstrapped(t)
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		s.owner = pub
		_, err := run(t, dir, "--endpoint", s.addr, "takeownership")
		if err == nil || !strings.Contains(err.Error(), "refused the call (permission denied)") {
			t.Errorf("takeownership with another key = %v, want PermissionDenied explained", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		dir, _ := bootstrapped(t)
		_, err := run(t, dir, "--endpoint", "127.0.0.1:1", "takeownership")
		if err == nil || !strings.Contains(err.Error(), "cannot reach 127.0.0.1:1") {
			t.Errorf("takeownership of an unreachable endpoint = %v, want it to say so", err)
		}
	})
}

func sameDER(a, b []byte) bool { return string(a) == string(b) }
