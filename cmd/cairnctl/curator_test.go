package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// runUntilOK runs cairnctl until it succeeds, for up to a minute, and
// returns what it printed: the curator answers Management only once it has
// won its election.
func runUntilOK(t *testing.T, dir string, args ...string) string {
	t.Helper()
	var out string
	fixture.Eventually(t, time.Minute, "cairnctl "+strings.Join(args, " "), func() error {
		var err error
		out, err = run(t, dir, args...)
		return err
	})
	return out
}

// ownedControlPlane makes an owner key in the configuration directory dir
// with params bootstrap, and starts an in-process control plane owned by
// it.
func ownedControlPlane(t *testing.T, dir string) *curatortest.ControlPlane {
	t.Helper()
	mustRun(t, dir, "params", "bootstrap", "--out", filepath.Join(dir, "bootstrap.pb"))
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := curatortest.StartControlPlane(t, curatortest.WithOwnerKey(key))
	t.Logf("control plane up in %s", time.Since(start).Round(time.Millisecond))
	return c
}

// TestAgainstCurator runs cairnctl against a real curator: takeownership,
// node list, params register, approving a node that registered with the
// ticket cairnctl wrote, and adding a role.
func TestAgainstCurator(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)

	start := time.Now()
	out := mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	t.Logf("takeownership in %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "(node "+c.Node.ID()+")") {
		t.Errorf("takeownership printed %q, want it to name node %s", out, c.Node.ID())
	}

	start = time.Now()
	var views []nodeView
	if err := json.Unmarshal([]byte(runUntilOK(t, dir, "node", "list", "-o", "json")), &views); err != nil {
		t.Fatalf("node list -o json: %v", err)
	}
	t.Logf("first node list in %s", time.Since(start).Round(time.Millisecond))
	if len(views) != 1 || views[0].ID != c.Node.ID() || views[0].State != "UP" ||
		len(views[0].Roles) != 1 || views[0].Roles[0] != roleConsensusMember {
		t.Fatalf("node list -o json = %+v, want %s UP with ConsensusMember", views, c.Node.ID())
	}

	paramsFile := filepath.Join(dir, "register.pb")
	mustRun(t, dir, "params", "register", "--out", paramsFile)
	data, err := os.ReadFile(paramsFile)
	if err != nil {
		t.Fatal(err)
	}
	reg := readParams(t, data).GetClusterRegister()
	if len(reg.GetRegisterTicket()) == 0 || !sameDER(reg.GetCaCertificate(), c.CA) ||
		len(reg.GetClusterDirectory().GetNodes()) != 1 || reg.GetClusterDirectory().GetNodes()[0].GetId() != c.Node.ID() {
		t.Fatalf("register parameters = %v, want the ticket, the CA and this node in the directory", reg)
	}

	// A new node registers with what cairnctl wrote, as enrolment would.
	newID, err := registerNewNode(t, c.Addr, reg)
	if err != nil {
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
	out = mustRun(t, dir, "node", "add-role", c.Node.ID(), "KubernetesWorker")
	if !strings.Contains(out, "ConsensusMember, KubernetesWorker") {
		t.Errorf("node add-role printed %q, want both roles", out)
	}
	if _, err := run(t, dir, "node", "delete", c.Node.ID()); err == nil || !strings.Contains(err.Error(), "refused in this state") {
		t.Errorf("deleting an UP node = %v, want FailedPrecondition explained", err)
	}
	var info clusterView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "info")), &info); err != nil {
		t.Fatalf("cluster info -o json: %v", err)
	}
	if info.CAFingerprint != fingerprint(c.CA) || info.TPM != "best-effort" {
		t.Errorf("cluster info = %+v, want the cluster's CA and TPM best-effort", info)
	}

	// Registry settings: replaced whole, shown by cluster info, cleared.
	out = mustRun(t, dir, "cluster", "registries", "--registry-mirror", "docker.io=http://10.42.0.1:5000", "--plain-http-registry", "10.42.0.1:5000")
	if !strings.Contains(out, "docker.io mirrored by http://10.42.0.1:5000") {
		t.Errorf("cluster registries printed %q, want the new mirror", out)
	}
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "info")), &info); err != nil {
		t.Fatalf("cluster info -o json: %v", err)
	}
	if m := info.Registries.Mirrors["docker.io"]; len(m) != 1 || m[0] != "http://10.42.0.1:5000" || len(info.Registries.PlainHTTP) != 1 {
		t.Errorf("cluster info shows registries %+v, want the docker.io mirror", info.Registries)
	}
	if out = mustRun(t, dir, "cluster", "registries", "--clear"); !strings.Contains(out, "no mirrors") {
		t.Errorf("cluster registries --clear printed %q, want no mirrors", out)
	}

	// Rotating the ticket: params register writes the new one, with
	// which nodes register, and the old one registers nobody.
	out = mustRun(t, dir, "cluster", "rotate-ticket")
	mustRun(t, dir, "params", "register", "--out", paramsFile)
	if data, err = os.ReadFile(paramsFile); err != nil {
		t.Fatal(err)
	}
	rotated := readParams(t, data).GetClusterRegister()
	if len(rotated.GetRegisterTicket()) == 0 || bytes.Equal(rotated.GetRegisterTicket(), reg.GetRegisterTicket()) {
		t.Fatalf("params register after rotate-ticket wrote ticket %x, want a new one (the old was %x)", rotated.GetRegisterTicket(), reg.GetRegisterTicket())
	}
	want := fmt.Sprintf("Rotated the register ticket: SHA256:%s replaced SHA256:%s.\n",
		ticketFingerprint(rotated.GetRegisterTicket()), ticketFingerprint(reg.GetRegisterTicket()))
	if !strings.HasPrefix(out, want) {
		t.Errorf("cluster rotate-ticket printed %q, want it to start with %q", out, want)
	}
	if _, err := registerNewNode(t, c.Addr, reg); status.Code(err) != codes.PermissionDenied {
		t.Errorf("RegisterNode with the ticket from before rotate-ticket = %v, want PermissionDenied", err)
	}
	if _, err := registerNewNode(t, c.Addr, rotated); err != nil {
		t.Errorf("RegisterNode with the ticket from params register after rotate-ticket: %v", err)
	}
	// The node registered before the rotation is approved as before.
	if v := describe(newID); v.State != "STANDBY" {
		t.Errorf("node registered before rotate-ticket is %s, want STANDBY", v.State)
	}
}

// registerNewNode registers a node with a fresh key at the curator at
// addr, with the ticket and CA of the register parameters reg, as
// enrolment would, and returns its ID.
func registerNewNode(t *testing.T, addr string, reg *api.NodeParameters_ClusterRegister) (string, error) {
	t.Helper()
	key, err := identity.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := rpc.EphemeralCredentials(reg.GetCaCertificate(), key)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	joinPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = api.NewCuratorClient(conn).RegisterNode(ctx, &api.RegisterNodeRequest{
		RegisterTicket: reg.GetRegisterTicket(), JoinKey: joinPub,
	})
	return identity.NodeID(key.Public().(ed25519.PublicKey)), err
}
