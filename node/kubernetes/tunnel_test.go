package kubernetes

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	api "cairn.dev/cairn/proto/api"
)

// TestTunnelPeers reads the pod tunnel's peers from a curator node list:
// the UP workers that published a pod network and have an address, in
// the order of their IDs; a decommissioned node, one without the role,
// one that published nothing or garbage, and one without an address are
// left out.
func TestTunnelPeers(t *testing.T) {
	key := func(b byte) []byte { return []byte(strings.Repeat(string(b), 32)) }
	node := func(state api.NodeState, worker bool, addr string, pn *api.PodNetwork) *api.Node {
		roles := &api.NodeRoles{}
		if worker {
			roles.KubernetesWorker = &api.NodeRoles_KubernetesWorker{}
		}
		return &api.Node{State: state, Roles: roles, Status: &api.NodeStatus{ExternalAddress: addr}, PodNetwork: pn}
	}
	up := api.NodeState_NODE_STATE_UP
	pn := func(k byte, r string) *api.PodNetwork {
		return &api.PodNetwork{WireguardPublicKey: key(k), PodRange: r}
	}
	nodes := map[string]*api.Node{
		"b":              node(up, true, "10.42.0.12", pn(2, "10.192.2.0/24")),
		"a":              node(up, true, "10.42.0.11", pn(1, "10.192.1.0/24")),
		"decommissioned": node(api.NodeState_NODE_STATE_DECOMMISSIONED, true, "10.42.0.13", pn(3, "10.192.3.0/24")),
		"controller":     node(up, false, "10.42.0.14", pn(4, "10.192.4.0/24")),
		"unpublished":    node(up, true, "10.42.0.15", nil),
		"short key":      node(up, true, "10.42.0.16", &api.PodNetwork{WireguardPublicKey: key(6)[:31], PodRange: "10.192.6.0/24"}),
		"bad range":      node(up, true, "10.42.0.17", pn(7, "10.192.7.0")),
		"no address":     node(up, true, "", pn(8, "10.192.8.0/24")),
	}
	want := []TunnelPeer{
		{Node: "a", Key: wgtypes.Key(key(1)), Address: netip.MustParseAddr("10.42.0.11"), Range: netip.MustParsePrefix("10.192.1.0/24")},
		{Node: "b", Key: wgtypes.Key(key(2)), Address: netip.MustParseAddr("10.42.0.12"), Range: netip.MustParsePrefix("10.192.2.0/24")},
	}
	if got := TunnelPeers(nodes); !slices.Equal(got, want) {
		t.Errorf("TunnelPeers = %+v, want %+v", got, want)
	}
}

// TestTunnelKey makes the pod tunnel's key once and reads the same key
// back after, and refuses, without replacing it, a file that holds none.
func TestTunnelKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), tunnelKeyFile)
	made, err := tunnelKey(path)
	if err != nil {
		t.Fatalf("making the key: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", st, err)
	}
	read, err := tunnelKey(path)
	if err != nil || read != made {
		t.Fatalf("reading the key again = %v, %v; want the key made first", read, err)
	}
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tunnelKey(path); err == nil || !strings.Contains(err.Error(), "holds no WireGuard key") {
		t.Fatalf("a garbled key file = %v, want an error saying so", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "not a key\n" {
		t.Fatalf("the garbled key file was replaced by %q", data)
	}
}
