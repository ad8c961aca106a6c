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

// kubernetesInputs are what a Kubernetes unit is built from; it runs again
// when they change.
type kubernetesInputs struct {
	// on is whether the node holds the unit's role (and, for the units of
	// a controller, runs a voting etcd member).
	on bool
	ip netip.Addr
	// etcd is the local etcd member a controller's apiserver uses.
	etcd *consensus.Status
}

// kubeUnit is what the three Kubernetes workers (kubecontroller,
// kubeworker, kubeservices) have in common: the values every unit of
// node/kubernetes is built from, and run, which runs a unit while the node
// holds its role and stops it when the role goes.
type kubeUnit struct {
	roles       event.Watchable[*api.NodeRoles]
	address     event.Watchable[netip.Prefix]
	credentials event.Watchable[*identity.Node]
	curator     event.Watchable[*curatorConn]
	layout      kubernetes.Layout
	// routing is the node's one, shared by the worker and the Services.
	routing *kubernetes.Routing
	// readiness is the node's one, shared by every unit's components
	// that wait for an apiserver.
	readiness *kubernetes.Readiness
	ports     ports.Table
}

// kubeRunner is one Kubernetes worker's own part.
type kubeRunner interface {
	// role names the unit in logs and errors.
	role() string
	// inputs are what the unit is built from for the node's state.
	inputs(s nodeState) kubernetesInputs
	// start runs the unit as a child of ctx's runnable.
	start(ctx context.Context, creds *identity.Node, cc *curatorConn, in kubernetesInputs) error
}

// run runs r's unit while its inputs say on. It follows localEtcd as well
// when not nil. It returns errInputChanged when the inputs change, so that
// its supervisor stops the unit and runs the worker again.
func (u *kubeUnit) run(ctx context.Context, localEtcd event.Watchable[*consensus.Status], r kubeRunner) error {
	creds, err := waitFor(ctx, u.credentials, "credentials")
	if err != nil {
		return err
	}
	start := func(s nodeState) error {
		in := r.inputs(s)
		if in.on {
			cc, err := waitFor(ctx, u.curator, "a curator connection")
			if err != nil {
				return err
			}
			if err := r.start(ctx, creds, cc, in); err != nil {
				return err
			}
			supervisor.Logger(ctx).Infof("%s started on %s", r.role(), in.ip)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		return nil
	}
	fits := func(started, now nodeState) error {
		if in := r.inputs(now); in != r.inputs(started) {
			return fmt.Errorf("%w: %s now %t on %s", errInputChanged, r.role(), in.on, in.ip)
		}
		return nil
	}
	return nodeInputs{roles: u.roles, address: u.address, localEtcd: localEtcd}.runFor(ctx, start, fits)
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
