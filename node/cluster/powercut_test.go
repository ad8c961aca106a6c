package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters/parameterstest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// registerCluster is a one-node cluster, bootstrapped by a testNode, that
// further nodes register with.
type registerCluster struct {
	port   int
	mgmt   api.ManagementClient
	params *api.NodeParameters
}

// newRegisterCluster bootstraps a cluster whose TPM mode is best effort,
// so that nodes with and without a TPM may join, takes ownership and
// returns register parameters with the real ticket.
func newRegisterCluster(t *testing.T, ctx context.Context) *registerCluster {
	t.Helper()
	ownerPub, owner, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	first := newTestNode(t)
	first.boot(t, &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{
			OwnerPublicKey:              ownerPub,
			InitialClusterConfiguration: &api.ClusterConfiguration{TpmMode: api.TPMMode_TPM_MODE_BEST_EFFORT},
		},
	}}, 0)
	fm := first.waitMembership(t)
	first.waitMarker(t, marker.Bootstrapped)
	firstNode, err := readIdentity(first.storage.st.Root)
	if err != nil {
		t.Fatal(err)
	}
	ca := firstNode.CACertificate().Raw
	mgmt := takeOwnership(t, ctx, first.curatorTarget(), ca, owner)
	ticket, err := mgmt.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	return &registerCluster{
		port: first.curatorPort,
		mgmt: mgmt,
		params: &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{
			ClusterRegister: &api.NodeParameters_ClusterRegister{
				RegisterTicket:   ticket.GetTicket(),
				ClusterDirectory: fm.ClusterDirectory,
				CaCertificate:    ca,
			},
		}},
	}
}

// states returns the state of every node the cluster lists.
func (c *registerCluster) states(t *testing.T, ctx context.Context) map[string]api.NodeState {
	t.Helper()
	res, err := c.mgmt.GetNodes(ctx, &api.GetNodesRequest{})
	if err != nil {
		t.Fatalf("GetNodes: %v", err)
	}
	m := map[string]api.NodeState{}
	for _, n := range res.GetNodes() {
		m[n.GetId()] = n.GetState()
	}
	return m
}

// waitState waits until the cluster lists node id in state want.
func (c *registerCluster) waitState(t *testing.T, ctx context.Context, id string, want api.NodeState) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); c.states(t, ctx)[id] != want; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s is not %v within a minute: %v", id, want, c.states(t, ctx))
		}
	}
}

// registrationKeysOnESP unseals the registration keys the node keeps on
// its ESP.
func (n *testNode) registrationKeysOnESP(t *testing.T) *nodeKeys {
	t.Helper()
	b, err := n.storage.st.Root.ESP.Cairn.RegistrationKeys.Read()
	if err != nil {
		t.Fatalf("no registration keys on the ESP: %v", err)
	}
	k, err := (&Service{openTPM: n.tpm}).unsealRegistrationKeys(b)
	if err != nil {
		t.Fatalf("unsealing the registration keys: %v", err)
	}
	return k
}

// TestRegisterAgainAfterPowerCut cuts a registering node's power after it
// registered (NEW) and after it committed (UP), before it sealed its
// configuration: the next boot registers with the keys the first kept, so
// the cluster lists the machine once, under the node ID it registered
// with, and the sealed configuration holds the kept keys. A cut between
// sealing and removing the kept keys leaves them for the next boot, a
// join, to remove.
func TestRegisterAgainAfterPowerCut(t *testing.T) {
	ctx := fixture.Context(t)
	c := newRegisterCluster(t, ctx)
	for _, tc := range []struct {
		name string
		// committed cuts the power once the node is UP; else once it
		// waits for approval.
		committed bool
		hasTPM    bool
	}{
		{"after registering, with a TPM", false, true},
		{"after committing, with a TPM", true, true},
		{"after committing, without a TPM", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			if !tc.hasTPM {
				n.tpm = noTPM
			}
			before := c.states(t, ctx)
			if tc.committed {
				// Committed, the node would set up its data partition at
				// once: failing that holds it before sealing.
				n.storage.mu.Lock()
				n.storage.failNew = errors.New("the power is about to be cut")
				n.storage.mu.Unlock()
			}
			n.boot(t, c.params, c.port)
			id := n.waitMarker(t, marker.WaitingForApproval).Get("node")
			kept := n.registrationKeysOnESP(t)
			if got := identity.NodeID(kept.node.Public().(ed25519.PublicKey)); got != id {
				t.Fatalf("the registration keys on the ESP are those of %s, want %s, the node that registered", got, id)
			}
			if tc.committed {
				if _, err := c.mgmt.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: id}); err != nil {
					t.Fatalf("ApproveNode(%s): %v", id, err)
				}
				c.waitState(t, ctx, id, api.NodeState_NODE_STATE_UP)
			}

			// The power cut: this boot ends here, and the next one
			// starts with the disks as they are.
			n.cancel()
			n.storage.mu.Lock()
			n.storage.failNew = nil
			n.storage.mu.Unlock()
			n.boot(t, c.params, c.port)
			n.waitMarker(t, marker.Registering, "node", id)
			if !tc.committed {
				n.waitMarker(t, marker.WaitingForApproval, "node", id)
				if _, err := c.mgmt.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: id}); err != nil {
					t.Fatalf("ApproveNode(%s): %v", id, err)
				}
			}
			n.waitMarker(t, marker.Committed, "node", id)

			after := c.states(t, ctx)
			added := map[string]api.NodeState{}
			for nid, st := range after {
				if _, ok := before[nid]; !ok {
					added[nid] = st
				}
			}
			if d := cmp.Diff(map[string]api.NodeState{id: api.NodeState_NODE_STATE_UP}, added); d != "" {
				t.Errorf("records the machine added to the cluster differ (-want +got):\n%s", d)
			}
			sc := n.sealedConfiguration(t)
			if sc.GetNodeId() != id || !bytes.Equal(sc.GetJoinKey(), kept.join.Seed()) || !bytes.Equal(sc.GetNodeUnlockKey(), kept.nodeUnlockKey) {
				t.Errorf("the sealed configuration holds other keys than those kept before the cut (node %s, want %s)", sc.GetNodeId(), id)
			}
			if there, err := n.storage.st.Root.ESP.Cairn.RegistrationKeys.Exists(); err != nil || there {
				t.Errorf("registration keys on the ESP after sealing: %v, %v; want them removed", there, err)
			}

			// A cut after sealing, before the keys were removed: the
			// next boot joins and removes them.
			n.keepRegistrationKeys(t, kept)
			n.boot(t, nil, c.port)
			n.waitMarker(t, marker.Joined, "node", id, "via", "curator")
			if there, err := n.storage.st.Root.ESP.Cairn.RegistrationKeys.Exists(); err != nil || there {
				t.Errorf("registration keys on the ESP after a join: %v, %v; want them removed", there, err)
			}
			n.cancel()
		})
	}
}

// keepRegistrationKeys writes k onto the node's ESP as enrolment does.
func (n *testNode) keepRegistrationKeys(t *testing.T, k *nodeKeys) {
	t.Helper()
	s := New(Config{Storage: n.storage.st, openTPM: n.tpm})
	if err := s.writeRegistrationKeys(logtree.New().LeveledFor("test"), k); err != nil {
		t.Fatal(err)
	}
}

// TestUnusableRegistrationKeys boots registering nodes whose ESP holds
// registration keys they must not use: damaged ones, ones sealed by
// another machine's TPM, and unsealed ones on a machine whose TPM works
// (which someone who could write the ESP may have put there). Each says
// so, registers with new keys and keeps those instead. Unsealed keys on a
// machine without a TPM are used.
func TestUnusableRegistrationKeys(t *testing.T) {
	planted, err := generateKeys(false)
	if err != nil {
		t.Fatal(err)
	}
	plantedID := identity.NodeID(planted.node.Public().(ed25519.PublicKey))
	payload, err := proto.Marshal(&private.RegistrationKeys{
		NodeKey: planted.node.Seed(), JoinKey: planted.join.Seed(), NodeUnlockKey: planted.nodeUnlockKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	otherTPM, err := newFakeTPM().Seal(payload)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		file   []byte
		hasTPM bool
		// used says the node registers with the planted keys.
		used bool
	}{
		{"damaged", []byte("CAIRNSCF and then nothing of use"), true, false},
		{"sealed by another TPM", marshalEnvelope(kindTPM, otherTPM), true, false},
		{"unsealed on a machine with a TPM", marshalEnvelope(kindPlain, payload), true, false},
		{"unsealed on a machine without a TPM", marshalEnvelope(kindPlain, payload), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			if !tc.hasTPM {
				n.tpm = noTPM
			}
			if err := n.storage.st.Root.ESP.Cairn.RegistrationKeys.Write(tc.file); err != nil {
				t.Fatal(err)
			}
			// Nobody answers at the parameters' curator: the node
			// names itself before it dials.
			n.boot(t, parameterstest.Register(t), fixture.FreePort(t))
			id := n.waitMarker(t, marker.Registering).Get("node")
			if (id == plantedID) != tc.used {
				t.Errorf("registering as %s, the planted keys' node is %s: used %v, want %v", id, plantedID, id == plantedID, tc.used)
			}
			if !tc.used {
				t.Logf("%s", n.waitLog(t, "Not using the registration keys", logtree.WARNING))
			}
			if got := n.registrationKeysOnESP(t); identity.NodeID(got.node.Public().(ed25519.PublicKey)) != id {
				t.Errorf("the registration keys on the ESP are not those the node registers with (%s)", id)
			}
			n.cancel()
		})
	}
}

func TestParseRegistrationKeys(t *testing.T) {
	k, err := generateKeys(false)
	if err != nil {
		t.Fatal(err)
	}
	good := &private.RegistrationKeys{NodeKey: k.node.Seed(), JoinKey: k.join.Seed(), NodeUnlockKey: k.nodeUnlockKey}
	b, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseRegistrationKeys(b)
	if err != nil {
		t.Fatalf("parseRegistrationKeys(good) = %v", err)
	}
	if !got.node.Equal(k.node) || !got.join.Equal(k.join) || !bytes.Equal(got.nodeUnlockKey, k.nodeUnlockKey) || got.clusterUnlockKey != nil {
		t.Errorf("parseRegistrationKeys(good) gave other keys than were marshalled")
	}
	for name, mutate := range map[string]func(*private.RegistrationKeys){
		"short node key":        func(r *private.RegistrationKeys) { r.NodeKey = r.NodeKey[:31] },
		"no join key":           func(r *private.RegistrationKeys) { r.JoinKey = nil },
		"long node unlock key":  func(r *private.RegistrationKeys) { r.NodeUnlockKey = append(r.NodeUnlockKey, 0) },
		"no node unlock key":    func(r *private.RegistrationKeys) { r.NodeUnlockKey = nil },
		"everything left empty": func(r *private.RegistrationKeys) { *r = private.RegistrationKeys{} },
	} {
		r := proto.Clone(good).(*private.RegistrationKeys)
		mutate(r)
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseRegistrationKeys(b); err == nil {
			t.Errorf("parseRegistrationKeys(%s) succeeded, want an error", name)
		}
	}
}

// FuzzUnsealRegistrationKeys feeds the reader of the registration keys
// file anything: it must not panic, and what it accepts must be keys of
// the right sizes.
func FuzzUnsealRegistrationKeys(f *testing.F) {
	tpm := newFakeTPM()
	k, err := generateKeys(false)
	if err != nil {
		f.Fatal(err)
	}
	payload, err := proto.Marshal(&private.RegistrationKeys{NodeKey: k.node.Seed(), JoinKey: k.join.Seed(), NodeUnlockKey: k.nodeUnlockKey})
	if err != nil {
		f.Fatal(err)
	}
	blob, err := tpm.Seal(payload)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(marshalEnvelope(kindTPM, blob), true)
	f.Add(marshalEnvelope(kindPlain, payload), false)
	f.Add([]byte(envelopeMagic), true)
	withTPM, without := &Service{openTPM: tpm.open}, &Service{openTPM: noTPM}
	f.Fuzz(func(t *testing.T, b []byte, hasTPM bool) {
		s := without
		if hasTPM {
			s = withTPM
		}
		k, err := s.unsealRegistrationKeys(b)
		if err != nil {
			return
		}
		if len(k.node) != ed25519.PrivateKeySize || len(k.join) != ed25519.PrivateKeySize || len(k.nodeUnlockKey) != localstorage.KeySize {
			t.Fatalf("accepted keys of %d, %d and %d bytes", len(k.node), len(k.join), len(k.nodeUnlockKey))
		}
	})
}
