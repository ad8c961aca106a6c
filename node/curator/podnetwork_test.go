package curator

import (
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// storedNode is a Node with spec.podCIDR 10.192.3.0/24 as the apiserver
// stores it in etcd, encoded by Kubernetes' protobuf serializer (as in
// node/kubernetes's TestStoredPodCIDR).
const storedNode = "6b3873000a0a0a02763112044e6f646512b5010a410a16636169726e2d3031323334353637383961626364656612001a0022002a003200380042005a190a106b756265726e657465732e696f2f6f7312056c696e757812370a0d31302e3139322e332e302f323412001a0020002a110a016b12001a0a4e6f5363686564756c653a0d31302e3139322e332e302f32341a371a002a170a0a496e7465726e616c4950120931302e302e322e313532040a0208003a140a0012001a0022002a0032003a0042004a0052001a002200"

// TestSetPodNetwork publishes workers' WireGuard keys and pod ranges
// through the real curator, against Nodes stored in etcd where the
// apiserver keeps them: refused without the role, with a bad key or range,
// before Kubernetes assigned a range and for a range it did not assign;
// then stored and shown in GetNodes; taken from the node that held it
// when Kubernetes gives the range to another; and a key without a range
// taken from a controller alone.
func TestSetPodNetwork(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	mgmt := c.mgmt(t, addr)
	first := c.nodes[0]
	second := newTestNode(t)
	c.enrol(t, addr, second)
	root := first.member.WaitVoter(t).Client()
	storedWithRange, err := hex.DecodeString(storedNode)
	if err != nil {
		t.Fatal(err)
	}
	key := func(b byte) []byte { return []byte(strings.Repeat(string(b), wireguardKeySize)) }
	set := func(n *testNode, key []byte, r string) error {
		_, err := n.client(t, addr).SetPodNetwork(ctx, &api.SetPodNetworkRequest{PodNetwork: &api.PodNetwork{WireguardPublicKey: key, PodRange: r}})
		return err
	}
	published := func() map[string]*api.PodNetwork {
		res, err := mgmt.GetNodes(ctx, &api.GetNodesRequest{})
		if err != nil {
			t.Fatalf("GetNodes: %v", err)
		}
		out := map[string]*api.PodNetwork{}
		for _, n := range res.Nodes {
			if n.PodNetwork != nil {
				out[n.Id] = n.PodNetwork
			}
		}
		return out
	}
	expect := func(err error, code codes.Code, what, says string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), says) {
			t.Errorf("%s = %v, want %s saying %q", what, err, code, says)
		}
	}

	expect(set(first, key(1), "10.192.3.0/24"), codes.PermissionDenied, "without the role", "KubernetesWorker")
	on := true
	for _, n := range []*testNode{first, second} {
		if _, err := mgmt.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: n.id(), KubernetesWorker: &on}); err != nil {
			t.Fatalf("UpdateNodeRoles: %v", err)
		}
	}
	expect(set(first, key(1)[:31], "10.192.3.0/24"), codes.InvalidArgument, "a short key", "31 bytes")
	expect(set(first, key(1), "10.192.3.1/24"), codes.InvalidArgument, "a host address as range", "not a network address")
	expect(set(first, key(1), "garbage"), codes.InvalidArgument, "a garbled range", "not a network address")
	expect(set(first, key(1), "10.192.3.0/24"), codes.FailedPrecondition, "without a Node", "no Node object")

	if _, err := root.Put(ctx, "kubernetes//registry/minions/"+first.id(), string(storedWithRange)); err != nil {
		t.Fatal(err)
	}
	expect(set(first, key(1), "10.192.4.0/24"), codes.FailedPrecondition, "another node's range", "assigned node "+first.id()+" the pod range 10.192.3.0/24, not 10.192.4.0/24")
	if len(published()) != 0 {
		t.Fatalf("refused calls published %v", published())
	}
	if err := set(first, key(1), "10.192.3.0/24"); err != nil {
		t.Fatalf("SetPodNetwork with the assigned range: %v", err)
	}
	want := &api.PodNetwork{WireguardPublicKey: key(1), PodRange: "10.192.3.0/24"}
	if got := published(); len(got) != 1 || !proto.Equal(got[first.id()], want) {
		t.Fatalf("published %v, want only %s's %v", got, first.id(), want)
	}

	// Kubernetes gave the range to the second node (the first's Node
	// was deleted): the first loses it as the second publishes it.
	if _, err := root.Delete(ctx, "kubernetes//registry/minions/"+first.id()); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "kubernetes//registry/minions/"+second.id(), string(storedWithRange)); err != nil {
		t.Fatal(err)
	}
	if err := set(second, key(2), "10.192.3.0/24"); err != nil {
		t.Fatalf("SetPodNetwork of the second node: %v", err)
	}
	want = &api.PodNetwork{WireguardPublicKey: key(2), PodRange: "10.192.3.0/24"}
	if got := published(); len(got) != 1 || !proto.Equal(got[second.id()], want) {
		t.Fatalf("published %v, want only %s's %v", got, second.id(), want)
	}

	// A key without a range is a controller's.
	expect(set(second, key(3), ""), codes.PermissionDenied, "without a range, by a worker", "KubernetesController")
	if _, err := mgmt.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: first.id(), KubernetesController: &on}); err != nil {
		t.Fatalf("UpdateNodeRoles: %v", err)
	}
	if err := set(first, key(3), ""); err != nil {
		t.Fatalf("SetPodNetwork of a controller, without a range: %v", err)
	}
	if got := published(); len(got) != 2 || !proto.Equal(got[first.id()], &api.PodNetwork{WireguardPublicKey: key(3)}) {
		t.Fatalf("published %v, want %s's key without a range", got, first.id())
	}
}
