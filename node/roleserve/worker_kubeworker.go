package roleserve

import (
	"context"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
)

// workerKubeWorker runs the Kubernetes worker (containerd, the kubelet,
// kube-proxy and the pod routes) while the node holds KubernetesWorker.
type workerKubeWorker struct {
	kubeUnit
	// apiservers are the controllers' apiservers (clusterwatch), which
	// the kubelet reaches through a balancer.
	apiservers event.Watchable[[]string]
	// tunnelPeers are the nodes the pod tunnel reaches (clusterwatch).
	tunnelPeers event.Watchable[[]kubernetes.TunnelPeer]
	// ready is the Ready condition of the node's Node object, false
	// while the worker does not run.
	ready *memory.Value[bool]
}

func (w *workerKubeWorker) run(ctx context.Context) error {
	return w.kubeUnit.run(ctx, nil, w)
}

func (w *workerKubeWorker) role() string { return "KubernetesWorker" }

func (w *workerKubeWorker) inputs(s nodeState) kubernetesInputs {
	return kubernetesInputs{ip: s.ip, on: s.roles.GetKubernetesWorker() != nil}
}

func (w *workerKubeWorker) start(ctx context.Context, creds *identity.Node, cc *curatorConn, in kubernetesInputs) error {
	w.ready.Set(false)
	wk := kubernetes.NewWorker(kubernetes.WorkerConfig{
		Ready:       w.ready,
		Layout:      w.layout,
		NodeID:      creds.ID(),
		IP:          in.ip,
		Curator:     cc.client(),
		APIServers:  w.apiservers,
		Ports:       w.ports,
		Routing:     w.routing,
		Readiness:   w.readiness,
		TunnelPeers: w.tunnelPeers,
	})
	return supervisor.Run(ctx, "worker", wk.Run)
}
