package kubernetes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// ipForward is the kernel's switch for forwarding IPv4 between
// interfaces; on a worker, the pod network's CNI plugin turns it on.
const ipForward = "/proc/sys/net/ipv4/ip_forward"

// ServicesConfig is what the Services of a controller that is not a
// worker need.
type ServicesConfig struct {
	Layout Layout
	// NodeID is the node's ID, the name kube-proxy goes by.
	NodeID string
	// IP is the node's address, where its NodePorts answer.
	IP netip.Addr
	// Curator issues the credential (cairn:proxy:<node>).
	Curator api.CuratorClient
	// Routing is the node's one Routing, which the Services' kube-proxy
	// and pod tunnel program.
	Routing *Routing
	// Readiness is the node's one Readiness, through which its
	// components wait for an apiserver; nil, each asks alone.
	Readiness *Readiness
	// Ports are the node's ports: its apiserver's, which Services reach.
	Ports ports.Table
	// TunnelPeers are the nodes the pod tunnel reaches, from the
	// curator's node list (TunnelPeers).
	TunnelPeers event.Watchable[[]TunnelPeer]
}

// Services makes a controller that is not a worker answer on the
// cluster's Services as a worker does: kube-proxy serves its NodePorts
// and gives the node its ClusterIPs, reaching the node's own apiserver as
// cairn:proxy:<node>, and the pod tunnel carries what it sends on to
// pods, as it carries what the apiserver sends to them.
//
// kube-proxy waits 30 s for a Node object of its name, which a node
// without KubernetesWorker never has, logs that it gave up, and serves.
type Services struct {
	cfg ServicesConfig
}

// NewServices returns the Services of cfg. Nothing runs before Run.
func NewServices(cfg ServicesConfig) *Services {
	cfg.Ports = cfg.Ports.WithDefaults()
	return &Services{cfg: cfg}
}

func (s *Services) dir(name ...string) string {
	return s.cfg.Layout.run(append([]string{"services"}, name...)...)
}

// apiserverURL is the node's own apiserver.
func (s *Services) apiserverURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(s.cfg.Ports.KubernetesAPI)
}

// Run runs kube-proxy and the pod tunnel until ctx ends.
func (s *Services) Run(ctx context.Context) error {
	if err := mkdirs(s.dir()); err != nil {
		return err
	}
	// A NodePort's packets come in and go on to a pod of another node.
	if err := os.WriteFile(ipForward, []byte("1"), 0); err != nil {
		return fmt.Errorf("when turning IPv4 forwarding on: %w", err)
	}
	if err := supervisor.Run(ctx, "modules", loadModules(networkModules)); err != nil {
		return fmt.Errorf("when starting the modules: %w", err)
	}
	if err := supervisor.Run(ctx, "proxy", s.runProxy); err != nil {
		return fmt.Errorf("when starting kube-proxy: %w", err)
	}
	err := supervisor.Run(ctx, "tunnel", func(ctx context.Context) error {
		return runTunnel(ctx, tunnelConfig{
			keyFile: s.cfg.Layout.data(tunnelKeyFile), nodeID: s.cfg.NodeID, curator: s.cfg.Curator,
			peers: s.cfg.TunnelPeers, routing: s.cfg.Routing,
		})
	})
	if err != nil {
		return fmt.Errorf("when starting the pod tunnel: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

func (s *Services) runProxy(ctx context.Context) error {
	defer s.cfg.Routing.hold(ctx)()
	dir := s.dir("proxy")
	cred, kubeconfig, err := issueKubeconfig(ctx, s.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_PROXY, dir, s.apiserverURL())
	if err != nil {
		return err
	}
	// kube-proxy can do nothing before its apiserver, this node's, is
	// ready; started beside it, its own start would take seconds of the
	// CPU the apiserver needs to come up.
	cl, err := newAPIClient(s.apiserverURL(), cred)
	if err != nil {
		return err
	}
	if err := cl.waitReady(ctx, s.cfg.Readiness, supervisor.Logger(ctx).Infof); err != nil {
		return err
	}
	return runKubeProxy(ctx, s.cfg.Layout, s.cfg.Layout.bin("kube-proxy"), dir, s.cfg.NodeID, s.cfg.IP, kubeconfig, cred.renewAt)
}
