package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters/parameterstest"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// TestBootstrapThenColdStart bootstraps a cluster with the real role
// server (etcd, curator), then
// boots the node again: with its sealed configuration on the ESP it
// ignores the bootstrap parameters, finds itself alone in its cluster
// directory and starts cold from its sealed configuration.
func TestBootstrapThenColdStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conf     *api.ClusterConfiguration
		hasTPM   bool
		kind     envelopeKind
		security private.StorageSecurity
		mounts   []string
	}{
		{
			name:     "defaults with a TPM",
			hasTPM:   true,
			kind:     kindTPM,
			security: private.StorageSecurity_STORAGE_SECURITY_ENCRYPTED,
			mounts:   []string{"MountExisting"},
		},
		{
			name: "insecure, best effort without a TPM",
			conf: &api.ClusterConfiguration{
				StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE,
				TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
			},
			kind:     kindPlain,
			security: private.StorageSecurity_STORAGE_SECURITY_INSECURE,
			mounts:   []string{"MountExistingInsecure"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			if !tc.hasTPM {
				n.tpm = noTPM
			}
			params := withConfiguration(parameterstest.Bootstrap(t), tc.conf)
			n.boot(t, params, 0)
			m := n.waitMembership(t)
			n.waitMarker(t, marker.Bootstrapping)
			if m.Bootstrap == nil || m.Credentials != nil || m.InitialRoles.GetConsensusMember() == nil {
				t.Fatalf("bootstrap Membership = %+v, want Bootstrap, no Credentials, ConsensusMember", m)
			}
			if got := m.ClusterDirectory.GetNodes(); len(got) != 1 || got[0].GetAddresses()[0].GetHost() != "127.0.0.1" {
				t.Errorf("bootstrap directory = %v, want this node at 127.0.0.1", m.ClusterDirectory)
			}
			id := m.ClusterDirectory.GetNodes()[0].GetId()

			// The role server bootstraps etcd and the curator; enrolment
			// then stores and seals the identity it made.
			n.waitMarker(t, marker.Bootstrapped, "node", id)
			n.waitMarker(t, marker.CuratorServing, "addr", n.curatorTarget())
			if !tc.hasTPM {
				n.waitLog(t, "No TPM: storing the configuration unsealed", logtree.WARNING)
			}
			n.waitMarker(t, marker.ConfigurationSealed, "tpm", fmt.Sprint(tc.hasTPM))
			node, err := readIdentity(n.storage.st.Root)
			if err != nil {
				t.Fatalf("identity after the bootstrap: %v", err)
			}
			if node.ID() != id {
				t.Errorf("identity.pem holds %s, want %s", node.ID(), id)
			}
			n.cancel()

			b, err := n.storage.st.Root.ESP.Cairn.SealedConfiguration.Read()
			if err != nil {
				t.Fatal(err)
			}
			if kind, _, err := parseEnvelope(b); err != nil || kind != tc.kind {
				t.Errorf("sealed configuration is %v (%v), want %v", kind, err, tc.kind)
			}
			sc := n.sealedConfiguration(t)
			if sc.GetNodeId() != id || sc.GetStorageSecurity() != tc.security || !bytes.Equal(sc.GetClusterCaCertificate(), node.CACertificate().Raw) {
				t.Errorf("sealed configuration = %v, want node %s, %v, the cluster CA", sc, id, tc.security)
			}
			dirBytes, err := n.storage.st.Root.ESP.Cairn.ClusterDirectory.Read()
			if err != nil {
				t.Fatal(err)
			}
			var dir api.ClusterDirectory
			if err := proto.Unmarshal(dirBytes, &dir); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(m.ClusterDirectory, &dir, protocmp.Transform()); d != "" {
				t.Errorf("cluster directory on the ESP differs (-want +got):\n%s", d)
			}

			// Reboot, parameters still there: the node joins, alone,
			// which is a cold start from the sealed configuration.
			n.boot(t, params, 0)
			m2 := n.waitMembership(t)
			n.waitMarker(t, marker.Joined, "node", id, "via", "cold-start")
			if m2.Bootstrap != nil || m2.Credentials.ID() != id || !m2.NodeKey.Equal(node.PrivateKey()) {
				t.Errorf("cold start Membership = %+v, want the credentials of %s and no Bootstrap", m2, id)
			}
			if d := cmp.Diff(tc.mounts, n.storage.mountCalls()); d != "" {
				t.Errorf("mounts on the cold start differ (-want +got):\n%s", d)
			}
			if _, err := os.Stat(n.storage.st.Root.Data.Etcd.FullPath()); err != nil {
				t.Errorf("etcd data gone after the cold start: %v", err)
			}
		})
	}
}

// TestBoundSealOpensOnceABoot bootstraps a node whose boot binds seals to
// its release: the configuration is sealed bound, and unsealing ends for
// the boot once it is. After a reboot the join unseals, ends unsealing,
// and when the data partition fails to mount the first time, the join
// that starts over takes the configuration it opened instead of asking
// the TPM again, which would refuse by then.
func TestBoundSealOpensOnceABoot(t *testing.T) {
	n, tpm, id := bootstrapBound(t)
	n.waitMarker(t, marker.ConfigurationSealed, "tpm", "true", "bound", "true")
	waitCount(t, "EndUnsealing calls after the bootstrap", &tpm.ended, 1)

	n.storage.mu.Lock()
	n.storage.failExisting = errors.New("simulated disk failure")
	n.storage.mu.Unlock()
	n.boot(t, nil, n.curatorPort)
	n.waitMarker(t, marker.Joined, "node", id)
	if got := tpm.unseals.Load(); got != 1 {
		t.Errorf("the TPM unsealed %d times in the joining boot, want 1", got)
	}
	if got := tpm.ended.Load(); got != 2 {
		t.Errorf("EndUnsealing ran %d times in two boots, want 2", got)
	}
	if got := n.storage.mountCalls(); !slices.Equal(got, []string{"MountExisting", "MountExisting"}) {
		t.Errorf("mounts of the joining boot = %q, want MountExisting twice (the failure, then the retry)", got)
	}
}

// bootstrapBound bootstraps a node whose boot binds seals to its release
// (a fake TPM that binds, and a binding), and returns it, its TPM and its
// ID once it bootstrapped.
func bootstrapBound(t *testing.T) (*testNode, *fakeTPM, string) {
	t.Helper()
	n := newTestNode(t)
	tpm := newFakeTPM()
	tpm.bound = true
	n.tpm, n.binding = tpm.open, &tpmseal.Binding{}
	n.boot(t, parameterstest.Bootstrap(t), 0)
	id := n.waitMembership(t).ClusterDirectory.GetNodes()[0].GetId()
	n.waitMarker(t, marker.Bootstrapped, "node", id)
	return n, tpm, id
}

// waitCount waits up to a minute for c to reach want.
func waitCount(t *testing.T, what string, c *atomic.Int32, want int32) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); c.Load() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, c.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJoinRebinds: a join in a boot whose PCR key the seal does not trust
// (the fake TPM's rebind) seals the configuration again and writes it
// (the marker comes after the write), and the next boot joins from it.
func TestJoinRebinds(t *testing.T) {
	n, tpm, id := bootstrapBound(t)

	tpm.rebind.Store(true)
	n.boot(t, nil, n.curatorPort)
	n.waitMarker(t, marker.ConfigurationSealed, "rebound", "true")
	n.waitMarker(t, marker.Joined, "node", id)
	if got := tpm.rebinds.Load(); got != 1 {
		t.Errorf("Rebind sealed again %d times, want once", got)
	}

	tpm.rebind.Store(false)
	n.boot(t, nil, n.curatorPort)
	n.waitMarker(t, marker.Joined, "node", id)
}

// TestMountWaitsForDataModules boots a node whose data partition's
// modules are not loaded yet (Config.DataModules false): enrolment goes as
// far as it can without them and mounts nothing until they are. The
// bootstrap states it is bootstrapping; after a reboot, the join unseals
// its configuration with the TPM. Only once the value turns true does either mount the
// data partition, and the join logs how long it waited.
func TestMountWaitsForDataModules(t *testing.T) {
	n := newTestNode(t)
	tpm := newFakeTPM()
	n.tpm = tpm.open
	params := parameterstest.Bootstrap(t)
	const still = 300 * time.Millisecond

	n.dataModules = &memory.Value[bool]{}
	n.dataModules.Set(false)
	n.boot(t, params, 0)
	n.waitMarker(t, marker.Bootstrapping)
	time.Sleep(still)
	if got := n.storage.mountCalls(); len(got) != 0 {
		t.Fatalf("the bootstrap mounted %q before the data partition's modules were loaded", got)
	}
	n.dataModules.Set(true)
	id := n.waitMarker(t, marker.Bootstrapped).Get("node")
	if got := n.storage.mountCalls(); !slices.Equal(got, []string{"MountNew"}) {
		t.Errorf("mounts of the bootstrap = %q, want MountNew", got)
	}

	n.dataModules = &memory.Value[bool]{}
	n.dataModules.Set(false)
	n.boot(t, params, 0)
	waitCount(t, "the join's Unseal calls", &tpm.unseals, 1)
	time.Sleep(still)
	if got := n.storage.mountCalls(); len(got) != 0 {
		t.Fatalf("the join mounted %q before the data partition's modules were loaded", got)
	}
	n.dataModules.Set(true)
	n.waitMarker(t, marker.Joined, "node", id, "via", "cold-start")
	if got := n.storage.mountCalls(); !slices.Equal(got, []string{"MountExisting"}) {
		t.Errorf("mounts of the join = %q, want MountExisting", got)
	}
	n.waitLog(t, "Waited ", logtree.INFO)
}
