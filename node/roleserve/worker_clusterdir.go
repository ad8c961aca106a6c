package roleserve

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// runClusterdir follows every node of the cluster to keep the cluster
// directory on the ESP current (the consensus members a rebooting node
// dials first), and tells the resolver where curators run.
func (s *Service) runClusterdir(ctx context.Context) error {
	cc, err := s.waitCurator(ctx)
	if err != nil {
		return err
	}
	file := &s.cfg.Storage.Root.ESP.Cairn.ClusterDirectory
	written, _ := file.Read()

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
		dir := clusterDirectory(nodes)
		if len(dir.Nodes) == 0 {
			// Never replace a directory by one that leads nowhere.
			continue
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(dir)
		if err != nil {
			return fmt.Errorf("when marshalling the cluster directory: %w", err)
		}
		if bytes.Equal(b, written) {
			continue
		}
		if err := s.cfg.Storage.Root.ESP.Cairn.MkdirAll(0o700); err != nil {
			return fmt.Errorf("when creating the ESP directory: %w", err)
		}
		if err := file.Write(b); err != nil {
			return fmt.Errorf("when writing the cluster directory: %w", err)
		}
		written = b
		supervisor.Logger(ctx).Infof("roleserve: cluster directory now lists %d consensus members", len(dir.Nodes))
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
