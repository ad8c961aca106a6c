package roleserve

import (
	"context"
	"net/netip"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	api "cairn.dev/cairn/proto/api"
)

// Health says whether the node serves what its roles ask for: what a trial
// boot of a new system slot must reach before the slot becomes the
// default (node/update).
type Health struct {
	// Healthy is set once the node is enrolled, its status reached the
	// curator leader, and every service its roles ask for serves.
	Healthy bool
	// Waiting names what is not there yet, when not Healthy.
	Waiting string
}

// workerHealth judges the node's health from what the other workers
// publish, each time any of it changes.
type workerHealth struct {
	// statusPushed is set once statuspush reached the curator leader:
	// the node is enrolled, and the cluster hears it.
	statusPushed event.Watchable[bool]
	roles        event.Watchable[*api.NodeRoles]
	// localEtcd is set while the node's etcd member votes and its
	// curator serves on it.
	localEtcd    event.Watchable[*consensus.Status]
	localCurator event.Watchable[netip.AddrPort]
	kubeletReady event.Watchable[bool]
	health       *memory.Value[Health]
}

func (w *workerHealth) run(ctx context.Context) error {
	pushedC := make(chan bool)
	rolesC := make(chan *api.NodeRoles)
	etcdC := make(chan *consensus.Status)
	curatorC := make(chan netip.AddrPort)
	readyC := make(chan bool)
	event.Pipe(ctx, w.statusPushed, pushedC)
	event.Pipe(ctx, w.roles, rolesC)
	event.Pipe(ctx, w.localEtcd, etcdC)
	event.Pipe(ctx, w.localCurator, curatorC)
	event.Pipe(ctx, w.kubeletReady, readyC)
	var (
		pushed, ready bool
		roles         *api.NodeRoles
		etcd          *consensus.Status
		curator       netip.AddrPort
	)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case pushed = <-pushedC:
		case roles = <-rolesC:
		case etcd = <-etcdC:
		case curator = <-curatorC:
		case ready = <-readyC:
		}
		w.health.Set(judgeHealth(pushed, roles, etcd, curator, ready))
	}
}

// judgeHealth is the node's health from its parts; kubeletReady is the
// Ready condition of its Node object.
func judgeHealth(pushed bool, roles *api.NodeRoles, etcd *consensus.Status, curator netip.AddrPort, kubeletReady bool) Health {
	switch {
	case !pushed:
		return Health{Waiting: "its status to reach the curator leader"}
	case roles == nil:
		return Health{Waiting: "its roles"}
	case roles.GetConsensusMember() != nil && etcd == nil:
		return Health{Waiting: "its etcd member to vote"}
	case roles.GetConsensusMember() != nil && !curator.IsValid():
		return Health{Waiting: "its curator to serve"}
	case roles.GetKubernetesWorker() != nil && !kubeletReady:
		return Health{Waiting: "its Kubernetes node to be Ready"}
	}
	return Health{Healthy: true}
}
