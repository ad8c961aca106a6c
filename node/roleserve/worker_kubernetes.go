package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// kubernetesInputs are what a Kubernetes runnable is built from; it runs
// again when they change.
type kubernetesInputs struct {
	// on is whether the node holds the role (and, for a controller, runs
	// a voting etcd member).
	on bool
	ip netip.Addr
	// etcd is the local etcd member a controller's apiserver uses.
	etcd *consensus.Status
}

// kubeUnit is what an instance of workerKubernetes runs.
type kubeUnit int

const (
	// kubeController: the control plane, on a node holding
	// KubernetesController with a voting etcd member.
	kubeController kubeUnit = iota
	// kubeWorker: the worker, on a node holding KubernetesWorker.
	kubeWorker
	// kubeServices: kube-proxy and the pod routes, on a node running the
	// control plane without KubernetesWorker (whose worker runs them).
	kubeServices
)

// workerKubernetes runs a Kubernetes unit while the node holds its role,
// and stops it when the role goes: one instance per unit.
type workerKubernetes struct {
	unit        kubeUnit
	address     event.Watchable[netip.Prefix]
	roles       event.Watchable[*api.NodeRoles]
	credentials event.Watchable[*identity.Node]
	curator     event.Watchable[*curatorConn]
	// localEtcd is the node's voting etcd member, nil while there is none
	// (controlplane).
	localEtcd event.Watchable[*consensus.Status]
	// apiservers are the controllers' apiservers (clusterdir).
	apiservers event.Watchable[[]string]
	// kubeNodes are the UP nodes' Kubernetes roles (clusterdir).
	kubeNodes event.Watchable[[]kubernetes.ClusterNode]
	layout    kubernetes.Layout
	ports     ports.Table
}

func (w *workerKubernetes) role() string {
	switch w.unit {
	case kubeController:
		return "KubernetesController"
	case kubeWorker:
		return "KubernetesWorker"
	}
	return "KubernetesController's Services"
}

// inputs are what the unit is built from for the node's state.
func (w *workerKubernetes) inputs(s nodeState) kubernetesInputs {
	in := kubernetesInputs{ip: s.ip}
	controller := s.roles.GetKubernetesController() != nil && s.etcd != nil
	switch w.unit {
	case kubeController:
		in.on = controller
		if in.on {
			in.etcd = s.etcd
		}
	case kubeWorker:
		in.on = s.roles.GetKubernetesWorker() != nil
	case kubeServices:
		in.on = controller && s.roles.GetKubernetesWorker() == nil
	}
	return in
}

func (w *workerKubernetes) run(ctx context.Context) error {
	creds, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	start := func(s nodeState) error {
		in := w.inputs(s)
		if in.on {
			cc, err := waitFor(ctx, w.curator, "a curator connection")
			if err != nil {
				return err
			}
			if err := w.start(ctx, creds, cc, in); err != nil {
				return err
			}
			supervisor.Logger(ctx).Infof("%s started on %s", w.role(), in.ip)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return nil
	}
	fits := func(started, now nodeState) error {
		if in := w.inputs(now); in != w.inputs(started) {
			return fmt.Errorf("%w: %s now %t on %s", errInputChanged, w.role(), in.on, in.ip)
		}
		return nil
	}
	node := nodeInputs{roles: w.roles, address: w.address}
	if w.unit != kubeWorker {
		node.localEtcd = w.localEtcd
	}
	return node.runFor(ctx, start, fits)
}

// start runs the unit as a child.
func (w *workerKubernetes) start(ctx context.Context, creds *identity.Node, cc *curatorConn, in kubernetesInputs) error {
	switch w.unit {
	case kubeServices:
		s := kubernetes.NewServices(kubernetes.ServicesConfig{
			Layout:  w.layout,
			NodeID:  creds.ID(),
			IP:      in.ip,
			Curator: cc.client(),
			Ports:   w.ports,
		})
		return supervisor.Run(ctx, "services", s.Run)
	case kubeController:
		c := kubernetes.NewController(kubernetes.ControllerConfig{
			Layout:   w.layout,
			IP:       in.ip,
			Curator:  cc.client(),
			Etcd:     in.etcd.RawClient(),
			HoldEtcd: in.etcd.Hold,
			Ports:    w.ports,
			Nodes:    w.kubeNodes,
		})
		return supervisor.Run(ctx, "controller", c.Run)
	}
	wk := kubernetes.NewWorker(kubernetes.WorkerConfig{
		Layout:     w.layout,
		NodeID:     creds.ID(),
		IP:         in.ip,
		Curator:    cc.client(),
		APIServers: w.apiservers,
		Ports:      w.ports,
	})
	return supervisor.Run(ctx, "worker", wk.Run)
}

// kubernetesLayout is where Kubernetes lives on the node of cfg.
func kubernetesLayout(cfg Config) kubernetes.Layout {
	return kubernetes.Layout{
		Bin:    kubernetes.DefaultBin,
		Data:   cfg.Storage.Root.Data.Kubernetes.FullPath(),
		Run:    filepath.Join(cfg.Storage.Root.Ephemeral.FullPath(), "kubernetes"),
		Etc:    "/etc",
		Cgroup: kubernetes.DefaultCgroup,
	}
}
