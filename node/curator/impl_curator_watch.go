package curator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/proto/api"
)

// backlogBatch is how many nodes one backlog event carries at most.
const backlogBatch = 100

// Watch implements Curator.Watch: a read of the current state, sent as the
// backlog, then an etcd watch from the revision of that read, so that no
// change falls between the two. Nodes carry their health as the leader
// last judged it (health.go), and a node is sent again when that
// judgement changes; such a stream ends when this curator stops leading.
// Each node may have maxWatchesPerNode streams open at once; more are
// refused with ResourceExhausted.
func (a nodeAPI) Watch(req *api.WatchRequest, srv grpc.ServerStreamingServer[api.WatchEvent]) error {
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	release, err := a.openWatch(ctx)
	if err != nil {
		return err
	}
	defer release()
	w := &watchStream{nodeAPI: a, srv: srv, nodes: true}
	switch k := req.Kind.(type) {
	case *api.WatchRequest_NodeInCluster_:
		if err := checkNodeID(k.NodeInCluster.GetNodeId()); err != nil {
			return err
		}
		w.key, w.id = nodeKey(k.NodeInCluster.NodeId), k.NodeInCluster.NodeId
	case *api.WatchRequest_NodesInCluster_:
		w.key, w.opts = nodePrefix, []clientv3.OpOption{clientv3.WithPrefix()}
	case *api.WatchRequest_Configuration_:
		w.key, w.nodes = configurationKey, false
	default:
		return status.Error(codes.InvalidArgument, "the request must name one node, all nodes or the configuration")
	}
	// Judgements of health come before the backlog, so that none made
	// after it is missed.
	views := make(chan *healthView)
	if w.nodes {
		if w.view = a.heartbeats.currentView(); w.view == nil || !w.view.leading {
			return errLeaderMoved
		}
		event.Pipe(ctx, &a.heartbeats.views, views)
	}

	resp, err := a.etcd.Get(ctx, w.key, w.opts...)
	if err != nil {
		return fmt.Errorf("when reading the backlog: %w", err)
	}
	w.rev = resp.Header.Revision
	ev := &api.WatchEvent{}
	for _, kv := range resp.Kvs {
		if err := w.add(ev, kv); err != nil {
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

	// Progress notifications move rev on while nothing changes, so that
	// a read at rev does not fall behind etcd's compaction.
	opts := slices.Concat(w.opts, []clientv3.OpOption{clientv3.WithRev(w.rev + 1), clientv3.WithProgressNotify()})
	wch := a.etcd.Watch(clientv3.WithRequireLeader(ctx), w.key, opts...)
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("etcd watch ended")
			}
			if err := w.sendChanges(wr); err != nil {
				return err
			}
		case v := <-views:
			if err := w.sendHealth(ctx, v); err != nil {
				return err
			}
		}
	}
}

// watchStream is what one Watch stream has sent.
type watchStream struct {
	nodeAPI
	srv grpc.ServerStreamingServer[api.WatchEvent]
	// key and opts are what the stream watches in etcd; id is the node
	// of a stream of one node.
	key  string
	opts []clientv3.OpOption
	id   string
	// nodes is set when the stream watches node records, not the
	// configuration.
	nodes bool
	// rev is a revision of etcd whose state of key the stream has sent
	// in full.
	rev int64
	// view is the judgement of health the stream sent nodes with.
	view *healthView
}

// sendChanges sends the changes of one etcd watch response.
func (w *watchStream) sendChanges(wr clientv3.WatchResponse) error {
	if err := wr.Err(); err != nil {
		return status.Errorf(codes.Unavailable, "etcd watch failed: %v", err)
	}
	if wr.IsProgressNotify() {
		w.rev = wr.Header.Revision
		return nil
	}
	ev := &api.WatchEvent{}
	for _, e := range wr.Events {
		w.rev = max(w.rev, e.Kv.ModRevision)
		if e.Type == clientv3.EventTypeDelete {
			ev.NodeTombstones = append(ev.NodeTombstones, nodeIDFromKey(e.Kv.Key))
			continue
		}
		if err := w.add(ev, e.Kv); err != nil {
			return err
		}
	}
	if len(ev.Nodes) == 0 && len(ev.NodeTombstones) == 0 && ev.Configuration == nil {
		return nil
	}
	if err := w.srv.Send(ev); err != nil {
		return fmt.Errorf("when sending a change: %w", err)
	}
	return nil
}

// sendHealth sends again, with their health in v, the UP nodes of the
// stream whose health changed since the view it sent them with. It reads
// them at the revision the stream sent, so that a record never goes ahead
// of the etcd changes still to come. The stream ends when v is of another
// term or its curator stopped leading.
func (w *watchStream) sendHealth(ctx context.Context, v *healthView) error {
	if !v.leading || v.term != w.view.term {
		return errLeaderMoved
	}
	ids := v.changedSince(w.view.seq)
	w.view = v
	if w.id != "" {
		ids = slices.DeleteFunc(ids, func(id string) bool { return id != w.id })
	}
	if !w.nodes || len(ids) == 0 {
		return nil
	}
	// One node's record, or all of them when several changed (as when a
	// new leader first hears from every node): one read either way.
	key, opts := w.key, w.opts
	if len(ids) == 1 {
		key, opts = nodeKey(ids[0]), nil
	}
	opts = slices.Concat(opts, []clientv3.OpOption{clientv3.WithRev(w.rev), clientv3.WithSerializable()})
	resp, err := w.etcd.Get(ctx, key, opts...)
	if err != nil {
		return fmt.Errorf("when reading the nodes whose health changed: %w", err)
	}
	ev := &api.WatchEvent{}
	for _, kv := range resp.Kvs {
		if _, ok := slices.BinarySearch(ids, nodeIDFromKey(kv.Key)); !ok {
			continue
		}
		n, err := decodeNode(kv)
		if err != nil {
			return err
		}
		if n.FsmState == api.NodeState_NODE_STATE_UP {
			ev.Nodes = append(ev.Nodes, w.publicNode(n, v.health))
		}
	}
	if len(ev.Nodes) == 0 {
		return nil
	}
	if err := w.srv.Send(ev); err != nil {
		return fmt.Errorf("when sending a change of health: %w", err)
	}
	return nil
}

// add adds what kv holds to ev: a node, with its health in the stream's
// view, or the configuration.
func (w *watchStream) add(ev *api.WatchEvent, kv *mvccpb.KeyValue) error {
	if !w.nodes {
		return addConfiguration(ev, kv)
	}
	n, err := decodeNode(kv)
	if err != nil {
		return err
	}
	ev.Nodes = append(ev.Nodes, w.publicNode(n, w.view.health))
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
