package roleserve

import (
	"context"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// workerKubeController runs the Kubernetes control plane while the node
// holds KubernetesController and a voting etcd member, which its apiserver
// uses.
type workerKubeController struct {
	kubeUnit
	// localEtcd is the node's voting etcd member, nil while there is none
	// (controlplane).
	localEtcd event.Watchable[*consensus.Status]
	// kubeNodes are the UP nodes' Kubernetes roles (clusterwatch), which
	// the reconciler gives the Node objects.
	kubeNodes event.Watchable[[]kubernetes.ClusterNode]
}

func (w *workerKubeController) run(ctx context.Context) error {
	return w.kubeUnit.run(ctx, w.localEtcd, w)
}

func (w *workerKubeController) role() string { return "KubernetesController" }

func (w *workerKubeController) inputs(s nodeState) kubernetesInputs {
	in := kubernetesInputs{ip: s.ip, on: runsController(s)}
	if in.on {
		in.etcd = s.etcd
	}
	return in
}

func (w *workerKubeController) start(ctx context.Context, _ *identity.Node, cc *curatorConn, in kubernetesInputs) error {
	c := kubernetes.NewController(kubernetes.ControllerConfig{
		Layout:     w.layout,
		IP:         in.ip,
		Curator:    cc.client(),
		Etcd:       in.etcd.RawClient(),
		EtcdServer: in.etcd.Server(),
		HoldEtcd:   in.etcd.Hold,
		Ports:      w.ports,
		Nodes:      w.kubeNodes,
		Readiness:  w.readiness,
	})
	return supervisor.Run(ctx, "controller", c.Run)
}

// runsController is whether the node runs the Kubernetes control plane:
// it holds KubernetesController and a voting etcd member.
func runsController(s nodeState) bool {
	return s.roles.GetKubernetesController() != nil && s.etcd != nil
}
