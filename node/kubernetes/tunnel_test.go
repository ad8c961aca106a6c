package kubernetes

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"cairn.dev/cairn/pkg/netnstest"
	api "cairn.dev/cairn/proto/api"
)

// TestTunnelPeers reads the pod tunnel's peers from a curator node list:
// the UP workers that published a pod network with a range and have an
// address, and the controllers that are no workers, without one, in the
// order of their IDs; a decommissioned node, one without a Kubernetes
// role, a controller with a range and a worker without, one that
// published nothing or garbage, and one without an address are left out.
// A peer sends from its range, or from its address if it has none.
func TestTunnelPeers(t *testing.T) {
	key := func(b byte) []byte { return []byte(strings.Repeat(string(b), 32)) }
	worker := &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}}
	controller := &api.NodeRoles{KubernetesController: &api.NodeRoles_KubernetesController{}}
	both := &api.NodeRoles{KubernetesWorker: worker.KubernetesWorker, KubernetesController: controller.KubernetesController}
	node := func(state api.NodeState, roles *api.NodeRoles, addr string, pn *api.PodNetwork) *api.Node {
		return &api.Node{State: state, Roles: roles, Status: &api.NodeStatus{ExternalAddress: addr}, PodNetwork: pn}
	}
	up := api.NodeState_NODE_STATE_UP
	pn := func(k byte, r string) *api.PodNetwork {
		return &api.PodNetwork{WireguardPublicKey: key(k), PodRange: r}
	}
	nodes := map[string]*api.Node{
		"b":                     node(up, worker, "10.42.0.12", pn(2, "10.192.2.0/24")),
		"a":                     node(up, both, "10.42.0.11", pn(1, "10.192.1.0/24")),
		"c":                     node(up, controller, "10.42.0.10", pn(9, "")),
		"decommissioned":        node(api.NodeState_NODE_STATE_DECOMMISSIONED, worker, "10.42.0.13", pn(3, "10.192.3.0/24")),
		"no Kubernetes role":    node(up, &api.NodeRoles{}, "10.42.0.14", pn(4, "10.192.4.0/24")),
		"controller with range": node(up, controller, "10.42.0.18", pn(5, "10.192.5.0/24")),
		"worker without range":  node(up, both, "10.42.0.19", pn(10, "")),
		"unpublished":           node(up, worker, "10.42.0.15", nil),
		"short key":             node(up, worker, "10.42.0.16", &api.PodNetwork{WireguardPublicKey: key(6)[:31], PodRange: "10.192.6.0/24"}),
		"bad range":             node(up, worker, "10.42.0.17", pn(7, "10.192.7.0")),
		"no address":            node(up, worker, "", pn(8, "10.192.8.0/24")),
	}
	want := []TunnelPeer{
		{Node: "a", Key: wgtypes.Key(key(1)), Address: netip.MustParseAddr("10.42.0.11"), Range: netip.MustParsePrefix("10.192.1.0/24")},
		{Node: "b", Key: wgtypes.Key(key(2)), Address: netip.MustParseAddr("10.42.0.12"), Range: netip.MustParsePrefix("10.192.2.0/24")},
		{Node: "c", Key: wgtypes.Key(key(9)), Address: netip.MustParseAddr("10.42.0.10")},
	}
	got := TunnelPeers(nodes)
	if !slices.Equal(got, want) {
		t.Fatalf("TunnelPeers = %+v, want %+v", got, want)
	}
	for i, allowed := range []string{"10.192.1.0/24", "10.192.2.0/24", "10.42.0.10/32"} {
		if a := got[i].allowed().String(); a != allowed {
			t.Errorf("%s may send from %s, want %s", got[i].Node, a, allowed)
		}
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

// TestTunnelPeersInWireGuard programs a WireGuard device's peers with
// setTunnelPeers, through the same WireGuard API the kernel's module
// serves (wgctrl), on WireGuard's own userspace implementation in a
// network namespace of its own (the kernel this runs on may lack the
// module): every other node a peer, reached at its address for its range
// or a controller's address, itself left out; then a peer decommissioned
// is gone at once, the others kept, and a new one added.
func TestTunnelPeersInWireGuard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace and a TUN device")
	}
	userspaceTunnel(t)
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	key := func(b byte) wgtypes.Key { return wgtypes.Key([]byte(strings.Repeat(string(b), 32))) }
	peer := func(node string, k byte, addr, r string) TunnelPeer {
		p := TunnelPeer{Node: node, Key: key(k), Address: netip.MustParseAddr(addr)}
		if r != "" {
			p.Range = netip.MustParsePrefix(r)
		}
		return p
	}
	programmed := func() []string {
		t.Helper()
		dev, err := wg.Device(tunnelDevice)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range dev.Peers {
			var allowed []string
			for _, a := range p.AllowedIPs {
				allowed = append(allowed, a.String())
			}
			out = append(out, fmt.Sprintf("%x at %s for %s", p.PublicKey[0], p.Endpoint, strings.Join(allowed, ",")))
		}
		slices.Sort(out)
		return out
	}
	peers := []TunnelPeer{
		peer("a", 1, "10.42.0.11", "10.192.1.0/24"),
		peer("me", 2, "10.42.0.12", "10.192.2.0/24"),
		peer("c", 3, "10.42.0.10", ""),
	}
	if err := setTunnelPeers(wg, "me", peers); err != nil {
		t.Fatal(err)
	}
	want := []string{"1 at 10.42.0.11:7838 for 10.192.1.0/24", "3 at 10.42.0.10:7838 for 10.42.0.10/32"}
	if got := programmed(); !slices.Equal(got, want) {
		t.Fatalf("peers %q, want %q", got, want)
	}
	// a is decommissioned; d joins.
	peers = []TunnelPeer{peers[1], peers[2], peer("d", 4, "10.42.0.14", "10.192.4.0/24")}
	if err := setTunnelPeers(wg, "me", peers); err != nil {
		t.Fatal(err)
	}
	want = []string{"3 at 10.42.0.10:7838 for 10.42.0.10/32", "4 at 10.42.0.14:7838 for 10.192.4.0/24"}
	if got := programmed(); !slices.Equal(got, want) {
		t.Fatalf("peers after a left and d joined %q, want %q", got, want)
	}
}

// userspaceTunnel runs WireGuard's userspace implementation as the tunnel
// device, on a TUN device in a network namespace of its own, with its API
// socket where wgctrl looks for it, until t ends.
func userspaceTunnel(t *testing.T) {
	t.Helper()
	ns := netnstest.New(t)
	var dev tun.Device
	err := netnstest.Do(ns, func() error {
		var err error
		dev, err = tun.CreateTUN(tunnelDevice, tunnelMTU)
		return err
	})
	if err != nil {
		t.Fatalf("creating a TUN device: %v", err)
	}
	// Silent: it asks the TUN device's MTU outside the namespace, and
	// says it cannot.
	logger := device.NewLogger(device.LogLevelSilent, "")
	wgDev := device.NewDevice(dev, conn.NewDefaultBind(), logger)
	t.Cleanup(wgDev.Close)
	file, err := ipc.UAPIOpen(tunnelDevice)
	if err != nil {
		t.Fatalf("opening WireGuard's API socket: %v", err)
	}
	uapi, err := ipc.UAPIListen(tunnelDevice, file)
	if err != nil {
		t.Fatalf("listening on WireGuard's API socket: %v", err)
	}
	t.Cleanup(func() { uapi.Close() })
	go func() {
		for {
			c, err := uapi.Accept()
			if err != nil {
				return
			}
			go wgDev.IpcHandle(c)
		}
	}()
}
