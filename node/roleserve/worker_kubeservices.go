package roleserve

import (
	"context"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// workerKubeServices runs kube-proxy and the pod tunnel on a node that
// runs the Kubernetes control plane without KubernetesWorker; a node with
// KubernetesWorker has them from its worker.
type workerKubeServices struct {
	kubeUnit
	// localEtcd is the node's voting etcd member, nil while there is none
	// (controlplane): without it the node runs no control plane.
	localEtcd event.Watchable[*consensus.Status]
	// tunnelPeers are the nodes the pod tunnel reaches (clusterwatch).
	tunnelPeers event.Watchable[[]kubernetes.TunnelPeer]
}

func (w *workerKubeServices) run(ctx context.Context) error {
	return w.kubeUnit.run(ctx, w.localEtcd, w)
}

func (w *workerKubeServices) role() string { return "KubernetesController's Services" }

func (w *workerKubeServices) inputs(s nodeState) kubernetesInputs {
	return kubernetesInputs{ip: s.ip, on: runsController(s) && s.roles.GetKubernetesWorker() == nil}
}

func (w *workerKubeServices) start(ctx context.Context, creds *identity.Node, cc *curatorConn, in kubernetesInputs) error {
	s := kubernetes.NewServices(kubernetes.ServicesConfig{
		Layout:      w.layout,
		NodeID:      creds.ID(),
		IP:          in.ip,
		Curator:     cc.client(),
		Ports:       w.ports,
		Routing:     w.routing,
		Readiness:   w.readiness,
		TunnelPeers: w.tunnelPeers,
	})
	return supervisor.Run(ctx, "services", s.Run)
}
