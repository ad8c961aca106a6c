package roleserve

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerClusterdir is the one writer of the cluster directory on the ESP
// (cairn/cluster_directory.pb): the curators a rebooting node dials
// first. It stores Membership.ClusterDirectory at once, so that a newly
// enrolled node has one before its configuration is sealed, then follows
// every node of the cluster to keep it current, and tells the resolver
// where curators run.
type workerClusterdir struct {
	membership event.Watchable[*Membership]
	curator    event.Watchable[*curatorConn]
	// file is the ESP's cairn/ directory, which holds the directory.
	file *localstorage.ESPCairnDirectory

	// stored is the directory last written (or found) on the ESP.
	stored event.Value[*api.ClusterDirectory]
	// apiservers are the apiservers of the cluster's Kubernetes
	// controllers, host:port on apiPort.
	apiservers event.Value[[]string]
	apiPort    int
	// kubeNodes are the UP nodes and their Kubernetes roles, for the
	// Kubernetes reconciler.
	kubeNodes event.Value[[]kubernetes.ClusterNode]
}

func (w *workerClusterdir) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	written, _ := w.file.ClusterDirectory.Read()
	if len(m.ClusterDirectory.GetNodes()) > 0 {
		if written, err = w.store(ctx, m.ClusterDirectory, written); err != nil {
			return err
		}
	}
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
		cc.resolver.SetCurators(curatorEndpoints(nodes))
		w.apiservers.Set(apiserverEndpoints(nodes, w.apiPort))
		w.kubeNodes.Set(kubeNodes(nodes))
		dir := clusterDirectory(nodes)
		if len(dir.Nodes) == 0 {
			// Never replace a directory by one that leads nowhere.
			continue
		}
		if written, err = w.store(ctx, dir, written); err != nil {
			return err
		}
	}
}

// store writes dir to the ESP unless it holds those bytes already
// (written), publishes it on stored, and returns what the file holds now.
func (w *workerClusterdir) store(ctx context.Context, dir *api.ClusterDirectory, written []byte) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(dir)
	if err != nil {
		return nil, fmt.Errorf("when marshalling the cluster directory: %w", err)
	}
	if !bytes.Equal(b, written) {
		if err := w.file.MkdirAll(0o700); err != nil {
			return nil, fmt.Errorf("when creating the ESP directory: %w", err)
		}
		if err := w.file.ClusterDirectory.Write(b); err != nil {
			return nil, fmt.Errorf("when writing the cluster directory: %w", err)
		}
		supervisor.Logger(ctx).Infof("Cluster directory now lists %d consensus members", len(dir.Nodes))
	}
	w.stored.Set(dir)
	return b, nil
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
		out = append(out, kubernetes.ClusterNode{
			ID:         id,
			Controller: n.GetRoles().GetKubernetesController() != nil,
			Worker:     n.GetRoles().GetKubernetesWorker() != nil,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
