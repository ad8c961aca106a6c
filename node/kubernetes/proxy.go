package kubernetes

import (
	"context"
)

// runProxy runs kube-proxy in its nftables mode: ClusterIP and NodePort
// Services on this node, for its pods and for the node itself. It runs
// the nft program of the system partition (PATH of Layout.command) and
// reads Services and EndpointSlices as the node's kubelet identity, which
// the reconciler binds to system:node-proxier.
func (w *Worker) runProxy(ctx context.Context) error {
	dir := w.dir("proxy")
	client, kubeconfig, err := w.nodeKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	config := dir + "/config.json"
	if err := writeJSON(config, w.proxyConfig(kubeconfig)); err != nil {
		return err
	}
	return runComponent(ctx, w.cfg.Layout.command("kube-proxy", "--config="+config), client.renewAt)
}

// proxyConfig is kube-proxy's KubeProxyConfiguration.
func (w *Worker) proxyConfig(kubeconfig string) map[string]any {
	return map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"mode":             "nftables",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig},
		"hostnameOverride": w.cfg.NodeID,
		"clusterCIDR":      PodRange,
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
