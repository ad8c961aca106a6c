package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// The pod tunnel: pod traffic between nodes goes through WireGuard,
// encrypted, never over the plain network.
//
//	pod ─▶ veth ─▶ node: route PodRange dev cairn-wg ─▶ WireGuard picks the
//	peer whose pod range holds the address ─▶ UDP 7838 to that node's IP
//	─▶ its cairn-wg ─▶ its route to the pod's veth ─▶ pod
//
// Each node with a Kubernetes role keeps its WireGuard key on the data
// partition and publishes the public half through the curator
// (Curator.SetPodNetwork): a worker with its pod range, which the curator
// checks against the one Kubernetes assigned, a controller that is no
// worker alone, to reach pods from its own address. Every node programs
// its peers from the curator's node list: the UP nodes that published
// theirs. A node decommissioned, or one that loses its Kubernetes role,
// is removed from every peer list as the curator tells of it, and its
// packets are dropped from then on: WireGuard takes a packet only from a
// peer it knows, and only with a source address that peer may send from.
// What reaches a node for its pods from outside the tunnel, in
// plaintext, is dropped too (guardPods).
const (
	// tunnelDevice is the node's WireGuard interface.
	tunnelDevice = "cairn-wg"
	// tunnelMTU leaves room in a 1500-byte packet of the node's network
	// for WireGuard's IPv4 header, UDP header and its own (60 bytes),
	// rounded down as WireGuard's tools do. Pods get it too, so that their
	// TCP never sends what the tunnel would have to fragment.
	tunnelMTU = 1420
	// tunnelKeyFile is where, below Kubernetes' data directory, the
	// node keeps its WireGuard private key, base64 as WireGuard's tools
	// write it.
	tunnelKeyFile = "pod-tunnel.key"
)

// A TunnelPeer is a node the pod tunnel reaches: a worker, for its pods,
// or a controller that is no worker.
type TunnelPeer struct {
	// Node is the node's ID.
	Node string
	// Key is the public key of its WireGuard interface.
	Key wgtypes.Key
	// Address is the node's IP, where its tunnel listens.
	Address netip.Addr
	// Range is its pod range; none for a controller that is no worker,
	// whose traffic comes from its address.
	Range netip.Prefix
}

// allowed is what the peer sends and receives through the tunnel: its pod
// range, or a controller's address.
func (p TunnelPeer) allowed() netip.Prefix {
	if p.Range.IsValid() {
		return p.Range
	}
	return netip.PrefixFrom(p.Address, 32)
}

// TunnelPeers lists, in the order of their IDs, the nodes of nodes (the
// curator's node list) that the pod tunnel reaches: the UP nodes that
// reported an address and published a pod network, holding
// KubernetesWorker with a pod range, or KubernetesController alone
// without one. A node whose published key or range does not parse is left
// out.
func TunnelPeers(nodes map[string]*api.Node) []TunnelPeer {
	var out []TunnelPeer
	for id, n := range nodes {
		roles := n.GetRoles()
		if n.GetState() != api.NodeState_NODE_STATE_UP || (roles.GetKubernetesWorker() == nil && roles.GetKubernetesController() == nil) {
			continue
		}
		pn := n.GetPodNetwork()
		key, err := wgtypes.NewKey(pn.GetWireguardPublicKey())
		if err != nil {
			continue
		}
		var r netip.Prefix
		if roles.GetKubernetesWorker() != nil {
			if r, err = netip.ParsePrefix(pn.GetPodRange()); err != nil {
				continue
			}
		} else if pn.GetPodRange() != "" {
			continue
		}
		addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
		if err != nil {
			continue
		}
		out = append(out, TunnelPeer{Node: id, Key: key, Address: addr, Range: r})
	}
	slices.SortFunc(out, func(a, b TunnelPeer) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// tunnelKey reads the node's WireGuard private key from path, or makes
// one and keeps it there when there is none. A file that holds no key is
// an error, not replaced: it may be a key damaged in a way someone wants
// to see.
func tunnelKey(path string) (wgtypes.Key, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		k, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
		if err != nil {
			return wgtypes.Key{}, fmt.Errorf("the pod tunnel's key %s holds no WireGuard key (remove it to make a new one): %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return wgtypes.Key{}, fmt.Errorf("when reading the pod tunnel's key: %w", err)
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("when making the pod tunnel's key: %w", err)
	}
	if err := mkdirs(filepath.Dir(path)); err != nil {
		return wgtypes.Key{}, err
	}
	if err := writeFile(path, []byte(k.String()+"\n"), 0o600); err != nil {
		return wgtypes.Key{}, err
	}
	return k, nil
}

// openTunnel makes the tunnel device if it is not there, gives it key and
// the tunnel's port, and brings it up. It returns the device's index.
func openTunnel(nl *netlink.Handle, wg *wgctrl.Client, key wgtypes.Key) (int, error) {
	link, err := nl.LinkByName(tunnelDevice)
	if _, missing := err.(netlink.LinkNotFoundError); missing {
		err = nl.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: tunnelDevice, MTU: tunnelMTU}})
		if err != nil {
			return 0, fmt.Errorf("when creating the WireGuard device %s: %w", tunnelDevice, err)
		}
		link, err = nl.LinkByName(tunnelDevice)
	}
	if err != nil {
		return 0, fmt.Errorf("when looking up the device %s: %w", tunnelDevice, err)
	}
	if link.Type() != "wireguard" {
		return 0, fmt.Errorf("the device %s is a %s device, not WireGuard", tunnelDevice, link.Type())
	}
	port := ports.PodTunnel
	if err := wg.ConfigureDevice(tunnelDevice, wgtypes.Config{PrivateKey: &key, ListenPort: &port}); err != nil {
		return 0, fmt.Errorf("when giving %s its key and port: %w", tunnelDevice, err)
	}
	if err := nl.LinkSetMTU(link, tunnelMTU); err != nil {
		return 0, fmt.Errorf("when setting the MTU of %s: %w", tunnelDevice, err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		return 0, fmt.Errorf("when bringing %s up: %w", tunnelDevice, err)
	}
	return link.Attrs().Index, nil
}

// setTunnelPeers makes the tunnel's peers those of peers other than self,
// each reached at its address for what it is allowed. Peers that stay
// keep their sessions; peers no longer listed are removed.
func setTunnelPeers(wg *wgctrl.Client, self string, peers []TunnelPeer) error {
	dev, err := wg.Device(tunnelDevice)
	if err != nil {
		return fmt.Errorf("when reading %s: %w", tunnelDevice, err)
	}
	var cfg wgtypes.Config
	wanted := map[wgtypes.Key]bool{}
	for _, p := range peers {
		if p.Node == self {
			continue
		}
		wanted[p.Key] = true
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{
			PublicKey:         p.Key,
			Endpoint:          &net.UDPAddr{IP: p.Address.AsSlice(), Port: ports.PodTunnel},
			ReplaceAllowedIPs: true,
			AllowedIPs:        []net.IPNet{*ipNet(p.allowed())},
		})
	}
	for _, p := range dev.Peers {
		if !wanted[p.PublicKey] {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		}
	}
	if err := wg.ConfigureDevice(tunnelDevice, cfg); err != nil {
		return fmt.Errorf("when setting the peers of %s: %w", tunnelDevice, err)
	}
	return nil
}

// removeTunnel deletes the tunnel device, if there is one, and says
// whether there was.
func removeTunnel(nl *netlink.Handle) (bool, error) {
	link, err := nl.LinkByName(tunnelDevice)
	if _, missing := err.(netlink.LinkNotFoundError); missing {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("when looking up the device %s: %w", tunnelDevice, err)
	}
	if err := nl.LinkDel(link); err != nil {
		return false, fmt.Errorf("when removing the device %s: %w", tunnelDevice, err)
	}
	return true, nil
}

// tunnelConfig is what the pod tunnel of a node needs.
type tunnelConfig struct {
	// keyFile is where the node keeps its WireGuard key.
	keyFile string
	nodeID  string
	curator api.CuratorClient
	peers   event.Watchable[[]TunnelPeer]
	routing *Routing
	// own is a worker's pod range, as the pod network learns it; nil
	// on a controller that is no worker, which publishes its key
	// without a range.
	own event.Watchable[netip.Prefix]
}

// runTunnel keeps the pod tunnel of cfg: the device with the node's key,
// the peers of the curator's node list, and the node's key (and pod
// range) published through the curator.
func runTunnel(ctx context.Context, cfg tunnelConfig) error {
	defer cfg.routing.hold(ctx)()
	key, err := tunnelKey(cfg.keyFile)
	if err != nil {
		return err
	}
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("when opening netlink: %w", err)
	}
	defer nl.Close()
	wg, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("when opening WireGuard's netlink: %w", err)
	}
	defer wg.Close()
	link, err := openTunnel(nl, wg, key)
	if err != nil {
		return err
	}
	nf, err := nftables.New(cfg.routing.nfOpts...)
	if err != nil {
		return fmt.Errorf("when opening nftables: %w", err)
	}
	if err := guardPods(nf, podPrefix); err != nil {
		return err
	}
	if cfg.own == nil {
		// A worker's address may be left from before the node lost
		// that role. The kernel drops the routes through a device
		// with its last address, so this comes before the routes.
		if err := addressTunnel(nl, netip.Prefix{}); err != nil {
			return err
		}
	}
	if err := routeThroughTunnel(nl, link, nil); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "publish", func(ctx context.Context) error {
		// A handle of its own: the runnable's goes when it returns.
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("when opening netlink: %w", err)
		}
		defer nl.Close()
		return publishPodNetwork(ctx, cfg.curator, key.PublicKey(), cfg.own, func(r netip.Prefix) error {
			return addressTunnel(nl, r)
		})
	}); err != nil {
		return fmt.Errorf("when starting to publish the pod network: %w", err)
	}
	lg := supervisor.Logger(ctx)
	lg.Infof("Pod tunnel %s up on UDP port %d, public key %s", tunnelDevice, ports.PodTunnel, key.PublicKey())
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	peers := cfg.peers.Watch()
	defer peers.Close()
	var last []TunnelPeer
	var controllers []netip.Addr
	for {
		// The peers as they change; the routes also every 10 s, which
		// puts back what went (the kernel's own flush of a device
		// whose last address was removed, say).
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ps, err := peers.Get(gctx)
		cancel()
		switch {
		case err == nil && !slices.Equal(ps, last):
			if err := setTunnelPeers(wg, cfg.nodeID, ps); err != nil {
				return err
			}
			last = ps
			controllers = nil
			var names []string
			for _, p := range ps {
				if p.Node == cfg.nodeID {
					continue
				}
				if !p.Range.IsValid() {
					controllers = append(controllers, p.Address)
				}
				names = append(names, p.Node+" ("+p.allowed().String()+" at "+p.Address.String()+")")
			}
			lg.Infof("Pod tunnel peers: %d: %s", len(names), strings.Join(names, ", "))
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		if err := routeThroughTunnel(nl, link, controllers); err != nil {
			return err
		}
	}
}

// addressTunnel gives the tunnel device the gateway address of the node's
// pod range r (its first, which the CNI plugin gives the pods' veths too,
// and never to a pod), and no other; none when r is not valid (a
// controller that is no worker). The node's own traffic to other nodes'
// pods (kube-proxy's NodePorts, a host network pod's) then leaves from
// it: the other end's WireGuard takes from a worker only what comes from
// its pod range, and from a controller only what comes from its address,
// and its answer comes back through the tunnel.
func addressTunnel(nl *netlink.Handle, r netip.Prefix) error {
	link, err := nl.LinkByName(tunnelDevice)
	if err != nil {
		return fmt.Errorf("when looking up the device %s: %w", tunnelDevice, err)
	}
	var gw netip.Prefix
	if r.IsValid() {
		// Added before any other goes, so that the device never
		// loses its last address, and with it its routes.
		gw = netip.PrefixFrom(r.Masked().Addr().Next(), 32)
		if err := nl.AddrReplace(link, &netlink.Addr{IPNet: ipNet(gw)}); err != nil {
			return fmt.Errorf("when giving %s the address %s: %w", tunnelDevice, gw, err)
		}
	}
	have, err := nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("when listing the addresses of %s: %w", tunnelDevice, err)
	}
	for _, a := range have {
		if a.IPNet.String() != ipNet(gw).String() || !gw.IsValid() {
			if err := nl.AddrDel(link, &a); err != nil {
				return fmt.Errorf("when removing address %s from %s: %w", a.IPNet, tunnelDevice, err)
			}
		}
	}
	return nil
}

// publishPodNetwork publishes key with the node's pod range through the
// curator, each time the range (which the pod network reads from the
// node's Node) changes, once address (which gives the tunnel its address
// in the range) succeeded; or, when own is nil, the key alone, once.
func publishPodNetwork(ctx context.Context, cur api.CuratorClient, key wgtypes.Key, own event.Watchable[netip.Prefix], address func(netip.Prefix) error) error {
	if own == nil {
		if err := publish(ctx, cur, &api.PodNetwork{WireguardPublicKey: key[:]}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	w := own.Watch()
	defer w.Close()
	for {
		r, err := w.Get(ctx)
		if err != nil {
			return err
		}
		if !r.IsValid() {
			continue
		}
		if err := address(r); err != nil {
			return err
		}
		if err := publish(ctx, cur, &api.PodNetwork{WireguardPublicKey: key[:], PodRange: r.String()}); err != nil {
			return err
		}
	}
}

// publish calls SetPodNetwork with pn until the curator takes it,
// retrying a refusal with a backoff: the curator may not have seen the
// node's range yet.
func publish(ctx context.Context, cur api.CuratorClient, pn *api.PodNetwork) error {
	lg := supervisor.Logger(ctx)
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 15*time.Second) {
		_, err := cur.SetPodNetwork(ctx, &api.SetPodNetworkRequest{PodNetwork: pn})
		if err == nil {
			lg.Infof("Published the pod tunnel's key with pod range %q", pn.PodRange)
			return nil
		}
		lg.Infof("Publishing the pod tunnel's key with pod range %q (again in %s): %v", pn.PodRange, wait, err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
