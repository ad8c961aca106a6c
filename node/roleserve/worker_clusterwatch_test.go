package roleserve

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// watchingCurator answers Watch with the events of its channel.
type watchingCurator struct {
	api.UnimplementedCuratorServer
	events chan *api.WatchEvent
}

func (c *watchingCurator) Watch(_ *api.WatchRequest, srv api.Curator_WatchServer) error {
	for {
		select {
		case ev := <-c.events:
			if err := srv.Send(ev); err != nil {
				return err
			}
		case <-srv.Context().Done():
			return srv.Context().Err()
		}
	}
}

// clusterView is what workerClusterwatch publishes.
type clusterView struct {
	Curators   []string
	Directory  *api.ClusterDirectory
	APIServers []string
	KubeNodes  []kubernetes.ClusterNode
	// TunnelPeers compares by node and range: the keys are arrays.
	TunnelPeers []string
}

// TestClusterwatchPublishes feeds workerClusterwatch a Watch of three nodes,
// then the removal of one, and checks what it publishes after each.
func TestClusterwatchPublishes(t *testing.T) {
	ctx := fixture.Context(t)
	member := &api.Node{
		Id:        "cairn-000000000000000a",
		PublicKey: []byte("a"),
		State:     api.NodeState_NODE_STATE_UP,
		Roles:     &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		Status: &api.NodeStatus{
			ExternalAddress: "10.42.0.10",
			RunningCurator:  &api.NodeStatus_RunningCurator{Port: 7833},
		},
	}
	kube := &api.Node{
		Id:    "cairn-000000000000000b",
		State: api.NodeState_NODE_STATE_UP,
		Roles: &api.NodeRoles{
			KubernetesController: &api.NodeRoles_KubernetesController{},
			KubernetesWorker:     &api.NodeRoles_KubernetesWorker{},
		},
		Status:     &api.NodeStatus{ExternalAddress: "10.42.0.11"},
		PodNetwork: &api.PodNetwork{WireguardPublicKey: make([]byte, 32), PodRange: "10.192.1.0/24"},
	}
	fresh := &api.Node{
		Id:    "cairn-000000000000000c",
		State: api.NodeState_NODE_STATE_NEW,
		Roles: &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}},
	}
	cur := &watchingCurator{events: make(chan *api.WatchEvent, 4)}
	cur.events <- &api.WatchEvent{Nodes: []*api.Node{member, kube}}
	cur.events <- &api.WatchEvent{Nodes: []*api.Node{fresh}, Progress: api.WatchEvent_PROGRESS_LAST_BACKLOGGED}
	var cc memory.Value[*curatorConn]
	cc.Set(fakeCurator(t, cur))
	w := &workerClusterwatch{
		curator:     &cc,
		apiPort:     6443,
		curators:    &memory.Value[[]string]{},
		directory:   &memory.Value[*api.ClusterDirectory]{},
		apiservers:  &memory.Value[[]string]{},
		kubeNodes:   &memory.Value[[]kubernetes.ClusterNode]{},
		tunnelPeers: &memory.Value[[]kubernetes.TunnelPeer]{},
	}
	runWorker(t, w.run)
	addrs := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

	// The directory is set last: once it is, the others hold the same
	// state of the cluster.
	view := func(wantNodes int) clusterView {
		t.Helper()
		dir, err := event.Get(ctx, w.directory, event.Filter(func(d *api.ClusterDirectory) bool { return len(d.GetNodes()) == wantNodes }))
		if err != nil {
			t.Fatalf("no directory of %d nodes: %v", wantNodes, err)
		}
		return clusterView{
			Curators:    current(t, w.curators),
			Directory:   dir,
			APIServers:  current(t, w.apiservers),
			KubeNodes:   current(t, w.kubeNodes),
			TunnelPeers: tunnelPeers(current(t, w.tunnelPeers)),
		}
	}
	want := clusterView{
		Curators: []string{"10.42.0.10:7833"},
		Directory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{{
			Id:        member.Id,
			PublicKey: member.PublicKey,
			Addresses: []*api.ClusterDirectory_Node_Address{{Host: "10.42.0.10"}},
		}}},
		APIServers: []string{"10.42.0.11:6443"},
		KubeNodes: []kubernetes.ClusterNode{
			{ID: member.Id, Addr: netip.MustParseAddr("10.42.0.10")},
			{ID: kube.Id, Controller: true, Worker: true, Addr: netip.MustParseAddr("10.42.0.11")},
		},
		TunnelPeers: []string{kube.Id + " 10.192.1.0/24 at 10.42.0.11"},
	}
	if diff := cmp.Diff(want, view(1), protocmp.Transform(), addrs); diff != "" {
		t.Errorf("after the backlog (-want +got):\n%s", diff)
	}

	cur.events <- &api.WatchEvent{NodeTombstones: []string{member.Id}}
	want = clusterView{
		Directory:   &api.ClusterDirectory{},
		APIServers:  []string{"10.42.0.11:6443"},
		KubeNodes:   []kubernetes.ClusterNode{{ID: kube.Id, Controller: true, Worker: true, Addr: netip.MustParseAddr("10.42.0.11")}},
		TunnelPeers: []string{kube.Id + " 10.192.1.0/24 at 10.42.0.11"},
	}
	if diff := cmp.Diff(want, view(0), protocmp.Transform(), addrs); diff != "" {
		t.Errorf("after the consensus member went (-want +got):\n%s", diff)
	}
}

// tunnelPeers names each peer by node, range and address.
func tunnelPeers(ps []kubernetes.TunnelPeer) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s %s at %s", p.Node, p.Range, p.Address))
	}
	return out
}

// current returns the value v holds, failing the test if it holds none.
func current[T any](t *testing.T, v event.Watchable[T]) T {
	t.Helper()
	x, err := event.Get(context.Background(), v, event.BacklogOnly[T]())
	if err != nil {
		t.Fatalf("no value: %v", err)
	}
	return x
}
