package roleserve

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerClusterwatch follows every node of the cluster through the
// curator's Watch and publishes what the other workers need of them: the
// curators (for the connection's resolver), the cluster directory (for
// clusterdir), and the apiservers and Kubernetes nodes (for the Kubernetes
// workers). It publishes nothing before the Watch's backlog is complete,
// so that nobody acts on half a cluster.
type workerClusterwatch struct {
	curator event.Watchable[*curatorConn]
	// apiPort is the apiservers' port on the controllers' hosts.
	apiPort int

	// curators are the host:port of every node that runs a curator.
	curators event.Value[[]string]
	// directory is the cluster directory the UP consensus members make;
	// it lists no node while none reported an address.
	directory event.Value[*api.ClusterDirectory]
	// apiservers are the apiservers of the cluster's Kubernetes
	// controllers, host:port on apiPort.
	apiservers event.Value[[]string]
	// kubeNodes are the UP nodes and their Kubernetes roles, for the
	// Kubernetes reconciler.
	kubeNodes event.Value[[]kubernetes.ClusterNode]
	// tunnelPeers are the nodes the pod tunnel reaches, for the
	// Kubernetes worker and services.
	tunnelPeers event.Value[[]kubernetes.TunnelPeer]
}

func (w *workerClusterwatch) run(ctx context.Context) error {
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	stream, err := cc.client().Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodesInCluster_{
		NodesInCluster: &api.WatchRequest_NodesInCluster{},
	}})
	if err != nil {
		return fmt.Errorf("when watching nodes: %w", err)
	}
	nodes := make(map[string]*api.Node)
	backlogged := false
	for {
		ev, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("when watching nodes: %w", err)
		}
		for _, n := range ev.GetNodes() {
			nodes[n.GetId()] = n
		}
		for _, id := range ev.GetNodeTombstones() {
			delete(nodes, id)
		}
		if ev.GetProgress() == api.WatchEvent_PROGRESS_LAST_BACKLOGGED && !backlogged {
			backlogged = true
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
		if !backlogged {
			continue
		}
		w.curators.Set(curatorEndpoints(nodes))
		w.apiservers.Set(apiserverEndpoints(nodes, w.apiPort))
		w.kubeNodes.Set(kubeNodes(nodes))
		w.tunnelPeers.Set(kubernetes.TunnelPeers(nodes))
		w.directory.Set(clusterDirectory(nodes))
	}
}

// clusterDirectory lists the UP consensus members that reported an address,
// in the order of their IDs.
func clusterDirectory(nodes map[string]*api.Node) *api.ClusterDirectory {
	dir := &api.ClusterDirectory{}
	for _, n := range nodes {
		addr := n.GetStatus().GetExternalAddress()
		if n.GetRoles().GetConsensusMember() == nil || addr == "" || n.GetState() != api.NodeState_NODE_STATE_UP {
			continue
		}
		dir.Nodes = append(dir.Nodes, &api.ClusterDirectory_Node{
			Id:        n.GetId(),
			PublicKey: n.GetPublicKey(),
			Addresses: []*api.ClusterDirectory_Node_Address{{Host: addr}},
		})
	}
	sort.Slice(dir.Nodes, func(i, j int) bool { return dir.Nodes[i].Id < dir.Nodes[j].Id })
	return dir
}

// curatorEndpoints are the host:port of every node that runs a curator,
// in the order of their IDs.
func curatorEndpoints(nodes map[string]*api.Node) []string {
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var eps []string
	for _, id := range ids {
		st := nodes[id].GetStatus()
		if st.GetRunningCurator() == nil || st.GetExternalAddress() == "" {
			continue
		}
		eps = append(eps, net.JoinHostPort(st.GetExternalAddress(), strconv.Itoa(int(st.GetRunningCurator().GetPort()))))
	}
	return eps
}

// apiserverEndpoints are the host:port of the apiserver of every UP node
// with the KubernetesController role, in the order of their IDs.
func apiserverEndpoints(nodes map[string]*api.Node, port int) []string {
	ids := make([]string, 0, len(nodes))
	for id, n := range nodes {
		if n.GetState() == api.NodeState_NODE_STATE_UP && n.GetRoles().GetKubernetesController() != nil && n.GetStatus().GetExternalAddress() != "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	eps := make([]string, 0, len(ids))
	for _, id := range ids {
		eps = append(eps, net.JoinHostPort(nodes[id].GetStatus().GetExternalAddress(), strconv.Itoa(port)))
	}
	return eps
}

// kubeNodes lists the UP nodes with their Kubernetes roles, in the order of
// their IDs.
func kubeNodes(nodes map[string]*api.Node) []kubernetes.ClusterNode {
	out := []kubernetes.ClusterNode{}
	for id, n := range nodes {
		if n.GetState() != api.NodeState_NODE_STATE_UP {
			continue
		}
		addr, _ := netip.ParseAddr(n.GetStatus().GetExternalAddress())
		out = append(out, kubernetes.ClusterNode{
			ID:         id,
			Controller: n.GetRoles().GetKubernetesController() != nil,
			Worker:     n.GetRoles().GetKubernetesWorker() != nil,
			Addr:       addr,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
