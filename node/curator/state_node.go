package curator

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// checkNodeID refuses a malformed node ID with InvalidArgument.
func checkNodeID(id string) error {
	if !identity.ValidNodeID(id) {
		return status.Errorf(codes.InvalidArgument, "%q is not a node ID (cairn- and 16 lowercase hex digits)", id)
	}
	return nil
}

// getNode reads the record of node id and its etcd mod revision. A missing
// node is NotFound.
func (c *curator) getNode(ctx context.Context, id string) (*private.Node, int64, error) {
	resp, err := c.etcd.Get(ctx, nodeKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("when reading node %s: %w", id, err)
	}
	return nodeFrom(id, resp.Kvs)
}

// nodeFrom decodes the record of node id in kvs, a read of its key, and
// returns it with its mod revision. A missing node is NotFound.
func nodeFrom(id string, kvs []*mvccpb.KeyValue) (*private.Node, int64, error) {
	if len(kvs) == 0 {
		return nil, 0, status.Errorf(codes.NotFound, "no node %s in the cluster", id)
	}
	n := &private.Node{}
	if err := proto.Unmarshal(kvs[0].Value, n); err != nil {
		return nil, 0, fmt.Errorf("when decoding node %s: %w", id, err)
	}
	return n, kvs[0].ModRevision, nil
}

// decodeNode decodes the node record kv, a key under nodePrefix.
func decodeNode(kv *mvccpb.KeyValue) (*private.Node, error) {
	n := &private.Node{}
	if err := proto.Unmarshal(kv.Value, n); err != nil {
		return nil, fmt.Errorf("when decoding node %s: %w", nodeIDFromKey(kv.Key), err)
	}
	return n, nil
}

// listNodes reads every node record, sorted by ID, with the revision of
// etcd at which they were read.
func (c *curator) listNodes(ctx context.Context) ([]*private.Node, int64, error) {
	resp, err := c.etcd.Get(ctx, nodePrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, 0, fmt.Errorf("when listing nodes: %w", err)
	}
	nodes := make([]*private.Node, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, err := decodeNode(kv)
		if err != nil {
			return nil, 0, err
		}
		nodes = append(nodes, n)
	}
	return nodes, resp.Header.Revision, nil
}

// updateNode changes the record of node id with change and writes it back
// in a transaction that succeeds only if nobody wrote it in between;
// otherwise it reads and changes it again. It returns the record as
// written (or as it was, if change returned errUnchanged).
func (c *curator) updateNode(ctx context.Context, id string, change func(*private.Node) error) (*private.Node, error) {
	return c.updateNodeGuarded(ctx, id, change, nil)
}

// updateNodeGuarded is updateNode with a guard, called before each attempt,
// that may refuse the update or add comparisons to its transaction: the
// update happens only if they hold too.
func (c *curator) updateNodeGuarded(ctx context.Context, id string, change func(*private.Node) error, guard func(context.Context) ([]clientv3.Cmp, error)) (*private.Node, error) {
	for {
		var extra []clientv3.Cmp
		if guard != nil {
			var err error
			if extra, err = guard(ctx); err != nil {
				return nil, err
			}
		}
		n, rev, err := c.getNode(ctx, id)
		if err != nil {
			return nil, err
		}
		wasNew := n.FsmState == api.NodeState_NODE_STATE_NEW
		if err := change(n); errors.Is(err, errUnchanged) {
			return n, nil
		} else if err != nil {
			return nil, err
		}
		data, err := proto.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("when encoding node %s: %w", id, err)
		}
		cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(nodeKey(id)), "=", rev)}, extra...)
		ops := []clientv3.Op{clientv3.OpPut(nodeKey(id), string(data))}
		if wasNew && n.FsmState != api.NodeState_NODE_STATE_NEW {
			ops = append(ops, clientv3.OpDelete(waitingKey(id)))
		}
		resp, err := c.etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
		// Whatever the outcome, as the write may have happened (honours).
		c.honours.forget(id)
		if err != nil {
			return nil, fmt.Errorf("when writing node %s: %w", id, err)
		}
		if resp.Succeeded {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("when writing node %s: %w", id, err)
		}
	}
}

// publicNode shows a record as the API does: without secrets, with the
// time of the node's last heartbeat to this leader and, when it is UP (only
// UP nodes beat), its health as health judges it.
func (c *curator) publicNode(n *private.Node, health func(id string) api.NodeHealth) *api.Node {
	id := identity.NodeID(n.PublicKey)
	out := &api.Node{
		Id:             id,
		PublicKey:      n.PublicKey,
		State:          n.FsmState,
		Roles:          n.Roles,
		Status:         n.Status,
		DesiredRelease: n.DesiredRelease,
		ReleaseToStage: n.ReleaseToStage,
		PodNetwork:     n.PodNetwork,
		SealsWithTpm:   n.SealsWithTpm,
	}
	if out.Roles == nil {
		out.Roles = &api.NodeRoles{}
	}
	if t, ok := c.heartbeats.last(id); ok {
		out.LastHeartbeatUnixNanos = t.UnixNano()
	}
	if n.FsmState == api.NodeState_NODE_STATE_UP {
		out.Health = health(id)
	}
	return out
}

// notLastMember refuses to take the ConsensusMember role from node id when
// no other node holds it. The count stays true only while no node record
// changes, which the returned comparison makes the update's condition.
func (c *curator) notLastMember(ctx context.Context, id string) ([]clientv3.Cmp, error) {
	nodes, rev, err := c.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	others := 0
	for _, n := range nodes {
		if n.GetRoles().GetConsensusMember() != nil && identity.NodeID(n.PublicKey) != id {
			others++
		}
	}
	if others == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is the cluster's last consensus member; give another node the role first", id)
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(nodePrefix), "<", rev+1).WithPrefix()}, nil
}

// deleteNode deletes the record of node id if it is still the one of
// revision rev, and says whether it was.
func (c *curator) deleteNode(ctx context.Context, id string, rev int64) (bool, error) {
	key := nodeKey(id)
	defer c.honours.forget(id)
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key), clientv3.OpDelete(waitingKey(id))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("when deleting node %s: %w", id, err)
	}
	return resp.Succeeded, nil
}
