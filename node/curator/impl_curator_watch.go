package curator

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// backlogBatch is how many nodes one backlog event carries at most.
const backlogBatch = 100

// Watch implements Curator.Watch: a read of the current state, sent as the
// backlog, then an etcd watch from the revision of that read, so that no
// change falls between the two. Each node may have maxWatchesPerNode
// streams open at once; more are refused with ResourceExhausted.
func (a nodeAPI) Watch(req *api.WatchRequest, srv grpc.ServerStreamingServer[api.WatchEvent]) error {
	ctx := srv.Context()
	release, err := a.openWatch(ctx)
	if err != nil {
		return err
	}
	defer release()
	key, opts, add := "", []clientv3.OpOption{}, a.addNode
	switch k := req.Kind.(type) {
	case *api.WatchRequest_NodeInCluster_:
		if err := checkNodeID(k.NodeInCluster.GetNodeId()); err != nil {
			return err
		}
		key = nodeKey(k.NodeInCluster.NodeId)
	case *api.WatchRequest_NodesInCluster_:
		key, opts = nodePrefix, []clientv3.OpOption{clientv3.WithPrefix()}
	case *api.WatchRequest_Configuration_:
		key, add = configurationKey, addConfiguration
	default:
		return status.Error(codes.InvalidArgument, "the request must name one node, all nodes or the configuration")
	}

	resp, err := a.etcd.Get(ctx, key, opts...)
	if err != nil {
		return fmt.Errorf("when reading the backlog: %w", err)
	}
	ev := &api.WatchEvent{}
	for _, kv := range resp.Kvs {
		if err := add(ev, kv); err != nil {
			return err
		}
		if len(ev.Nodes) == backlogBatch {
			if err := srv.Send(ev); err != nil {
				return fmt.Errorf("when sending the backlog: %w", err)
			}
			ev = &api.WatchEvent{}
		}
	}
	ev.Progress = api.WatchEvent_PROGRESS_LAST_BACKLOGGED
	if err := srv.Send(ev); err != nil {
		return fmt.Errorf("when sending the backlog: %w", err)
	}

	opts = append(opts, clientv3.WithRev(resp.Header.Revision+1))
	for wr := range a.etcd.Watch(clientv3.WithRequireLeader(ctx), key, opts...) {
		if err := wr.Err(); err != nil {
			return status.Errorf(codes.Unavailable, "etcd watch failed: %v", err)
		}
		ev := &api.WatchEvent{}
		for _, e := range wr.Events {
			if e.Type == clientv3.EventTypeDelete {
				ev.NodeTombstones = append(ev.NodeTombstones, nodeIDFromKey(e.Kv.Key))
				continue
			}
			if err := add(ev, e.Kv); err != nil {
				return err
			}
		}
		if len(ev.Nodes) == 0 && len(ev.NodeTombstones) == 0 && ev.Configuration == nil {
			continue
		}
		if err := srv.Send(ev); err != nil {
			return fmt.Errorf("when sending a change: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("etcd watch ended")
}

// addNode adds the node stored in kv to ev.
func (a nodeAPI) addNode(ev *api.WatchEvent, kv *mvccpb.KeyValue) error {
	n := &private.Node{}
	if err := proto.Unmarshal(kv.Value, n); err != nil {
		return fmt.Errorf("when decoding node %s: %w", nodeIDFromKey(kv.Key), err)
	}
	ev.Nodes = append(ev.Nodes, a.publicNode(n))
	return nil
}

// addConfiguration sets the cluster configuration stored in kv as ev's.
func addConfiguration(ev *api.WatchEvent, kv *mvccpb.KeyValue) error {
	c := &api.ClusterConfiguration{}
	if err := proto.Unmarshal(kv.Value, c); err != nil {
		return fmt.Errorf("when decoding the cluster configuration: %w", err)
	}
	ev.Configuration = c
	return nil
}

// WatchOwnerTrust implements Curator.WatchOwnerTrust: the current owner
// trust, then each new one as etcd reports it. It takes one of the
// caller's Watch slots.
func (a nodeAPI) WatchOwnerTrust(_ *api.WatchOwnerTrustRequest, srv grpc.ServerStreamingServer[api.WatchOwnerTrustResponse]) error {
	ctx := srv.Context()
	release, err := a.openWatch(ctx)
	if err != nil {
		return err
	}
	defer release()
	w := a.ownerTrust.Watch()
	defer w.Close()
	for {
		t, err := w.Get(ctx, event.NotNil[*api.OwnerTrust]())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return status.Errorf(codes.Unavailable, "when following the owner trust: %v", err)
		}
		if err := srv.Send(&api.WatchOwnerTrustResponse{Trust: t}); err != nil {
			return fmt.Errorf("when sending the owner trust: %w", err)
		}
	}
}

// GetCurrentLeader implements Curator.GetCurrentLeader from this
// curator's own view of the election.
func (a nodeAPI) GetCurrentLeader(_ *api.GetCurrentLeaderRequest, srv grpc.ServerStreamingServer[api.GetCurrentLeaderResponse]) error {
	ctx := srv.Context()
	w := a.leaders.Watch()
	defer w.Close()
	for {
		l, err := w.Get(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return ctx.Err()
			}
			return fmt.Errorf("when following the leader: %w", err)
		}
		resp := &api.GetCurrentLeaderResponse{LeaderNodeId: l.NodeID}
		if l.NodeID != "" {
			resp.LeaderHost = l.Addr.Addr().String()
			resp.LeaderPort = int32(l.Addr.Port())
		}
		if err := srv.Send(resp); err != nil {
			return fmt.Errorf("when sending the leader: %w", err)
		}
	}
}
