package kubernetes

import (
	"context"
	"net/netip"
	"time"
)

// runProxy runs kube-proxy in its nftables mode: ClusterIP and NodePort
// Services on this node, for its pods and for the node itself. It runs
// the nft program of the system partition (PATH of Layout.command) and
// reads Services and EndpointSlices as the node's kubelet identity, which
// the reconciler binds to cairn:node-proxier (what system:node-proxier
// allows).
func (w *Worker) runProxy(ctx context.Context) error {
	defer w.cfg.Routing.hold(ctx)()
	dir := w.dir("proxy")
	client, kubeconfig, err := w.nodeKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	return runKubeProxy(ctx, w.cfg.Layout, w.cfg.Layout.workerBin("kube-proxy"), dir, w.cfg.NodeID, w.cfg.IP, kubeconfig, client.renewAt)
}

// runKubeProxy runs the kube-proxy at program for node at ip with
// kubeconfig, its configuration in dir, until ctx ends or renewAt.
func runKubeProxy(ctx context.Context, l Layout, program, dir, node string, ip netip.Addr, kubeconfig string, renewAt time.Time) error {
	config := dir + "/config.json"
	if err := writeJSON(config, proxyConfig(node, ip, kubeconfig)); err != nil {
		return err
	}
	return l.runComponent(ctx, l.command(program, "--config="+config), renewAt)
}

// proxyConfig is kube-proxy's KubeProxyConfiguration for node at ip.
func proxyConfig(node string, ip netip.Addr, kubeconfig string) map[string]any {
	return map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"mode":             "nftables",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride": node,
		// The node's address, which kube-proxy would otherwise read
		// from a Node object that a controller without KubernetesWorker
		// does not have.
		"bindAddress": ip.String(),
		"clusterCIDR": PodRange,
		// Its own endpoints stay on the node's loopback.
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		// NodePorts answer on the node's own address.
		"nodePortAddresses": []string{"primary"},
		// The kernel's conntrack limits and timeouts are left as they
		// are (zero: do not set).
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
	}
}
