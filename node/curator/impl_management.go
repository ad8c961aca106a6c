package curator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// management implements api.ManagementServer for the leader.
type management struct {
	api.UnimplementedManagementServer
	*curator
}

func (m management) GetRegisterTicket(ctx context.Context, _ *api.GetRegisterTicketRequest) (*api.GetRegisterTicketResponse, error) {
	ticket, err := m.registerTicket(ctx)
	if err != nil {
		return nil, err
	}
	return &api.GetRegisterTicketResponse{Ticket: ticket}, nil
}

// errTicketRotated refuses a rotation whose previous ticket is no longer
// the cluster's.
var errTicketRotated = status.Error(codes.FailedPrecondition, "previous_ticket is not the cluster's register ticket: it was rotated since it was read; read it again with GetRegisterTicket")

// RotateRegisterTicket implements Management.RotateRegisterTicket: it
// replaces the ticket only while it is still the one the caller named.
func (m management) RotateRegisterTicket(ctx context.Context, req *api.RotateRegisterTicketRequest) (*api.RotateRegisterTicketResponse, error) {
	if len(req.PreviousTicket) == 0 {
		return nil, status.Error(codes.InvalidArgument, "previous_ticket is empty: name the ticket to replace, as GetRegisterTicket returns it")
	}
	previous, rev, err := m.storedTicket(ctx)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(previous, req.PreviousTicket) != 1 {
		return nil, errTicketRotated
	}
	ticket, err := newTicket()
	if err != nil {
		return nil, err
	}
	ok, err := m.putTicket(ctx, ticket, rev)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Another rotation came in between.
		return nil, errTicketRotated
	}
	return &api.RotateRegisterTicketResponse{Ticket: ticket}, nil
}

func (m management) GetClusterInfo(ctx context.Context, _ *api.GetClusterInfoRequest) (*api.GetClusterInfoResponse, error) {
	nodes, _, err := m.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	conf, err := m.configuration(ctx)
	if err != nil {
		return nil, err
	}
	ca, err := m.ca.Ensure(ctx, m.root)
	if err != nil {
		return nil, fmt.Errorf("when loading the cluster CA: %w", err)
	}
	return &api.GetClusterInfoResponse{
		ClusterDirectory:     directory(nodes),
		CaCertificate:        ca,
		ClusterConfiguration: conf,
	}, nil
}

// directory lists the nodes that run a curator: those holding
// ConsensusMember that reported an address.
func directory(nodes []*private.Node) *api.ClusterDirectory {
	dir := &api.ClusterDirectory{}
	for _, n := range nodes {
		addr := n.GetStatus().GetExternalAddress()
		if n.GetRoles().GetConsensusMember() == nil || addr == "" || n.FsmState != api.NodeState_NODE_STATE_UP {
			continue
		}
		dir.Nodes = append(dir.Nodes, &api.ClusterDirectory_Node{
			Id:        identity.NodeID(n.PublicKey),
			PublicKey: n.PublicKey,
			Addresses: []*api.ClusterDirectory_Node_Address{{Host: addr}},
		})
	}
	return dir
}

func (m management) GetNodes(ctx context.Context, req *api.GetNodesRequest) (*api.GetNodesResponse, error) {
	nodes, _, err := m.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	resp := &api.GetNodesResponse{}
	now := time.Now()
	health := func(id string) api.NodeHealth { return m.heartbeats.health(id, now) }
	for _, n := range nodes {
		if matches(req.GetFilter(), n) {
			resp.Nodes = append(resp.Nodes, m.publicNode(n, health))
		}
	}
	return resp, nil
}

// matches says whether n passes every criterion f sets.
func matches(f *api.NodeFilter, n *private.Node) bool {
	if ids := f.GetIds(); len(ids) > 0 && !slices.Contains(ids, identity.NodeID(n.PublicKey)) {
		return false
	}
	if states := f.GetStates(); len(states) > 0 && !slices.Contains(states, n.FsmState) {
		return false
	}
	want, have := f.GetRoles(), n.GetRoles()
	if want.GetConsensusMember() != nil && have.GetConsensusMember() == nil {
		return false
	}
	if want.GetKubernetesController() != nil && have.GetKubernetesController() == nil {
		return false
	}
	if want.GetKubernetesWorker() != nil && have.GetKubernetesWorker() == nil {
		return false
	}
	return true
}

func (m management) ApproveNode(ctx context.Context, req *api.ApproveNodeRequest) (*api.ApproveNodeResponse, error) {
	if err := checkNodeID(req.NodeId); err != nil {
		return nil, err
	}
	_, err := m.updateNode(ctx, req.NodeId, func(n *private.Node) error {
		switch n.FsmState {
		case api.NodeState_NODE_STATE_NEW:
			n.FsmState = api.NodeState_NODE_STATE_STANDBY
			return nil
		case api.NodeState_NODE_STATE_STANDBY, api.NodeState_NODE_STATE_UP:
			return errUnchanged
		}
		return status.Errorf(codes.FailedPrecondition, "node %s is %s; only a NEW node can be approved", req.NodeId, n.FsmState)
	})
	if err != nil {
		return nil, err
	}
	return &api.ApproveNodeResponse{}, nil
}

func (m management) UpdateNodeRoles(ctx context.Context, req *api.UpdateNodeRolesRequest) (*api.UpdateNodeRolesResponse, error) {
	if err := checkNodeID(req.NodeId); err != nil {
		return nil, err
	}
	removeMember := req.ConsensusMember != nil && !*req.ConsensusMember
	var guard func(context.Context) ([]clientv3.Cmp, error)
	if removeMember {
		guard = func(ctx context.Context) ([]clientv3.Cmp, error) { return m.notLastMember(ctx, req.NodeId) }
	}
	n, err := m.updateNodeGuarded(ctx, req.NodeId, func(n *private.Node) error {
		if n.FsmState != api.NodeState_NODE_STATE_UP {
			return status.Errorf(codes.FailedPrecondition, "node %s is %s; only an UP node can change roles", req.NodeId, n.FsmState)
		}
		before := proto.Clone(n.GetRoles())
		if n.Roles == nil {
			n.Roles = &api.NodeRoles{}
		}
		if req.ConsensusMember != nil {
			n.Roles.ConsensusMember = role(*req.ConsensusMember, &api.NodeRoles_ConsensusMember{})
		}
		if req.KubernetesController != nil {
			n.Roles.KubernetesController = role(*req.KubernetesController, &api.NodeRoles_KubernetesController{})
		}
		if req.KubernetesWorker != nil {
			n.Roles.KubernetesWorker = role(*req.KubernetesWorker, &api.NodeRoles_KubernetesWorker{})
		}
		if n.Roles.KubernetesController != nil && n.Roles.ConsensusMember == nil {
			return status.Errorf(codes.FailedPrecondition, "node %s cannot hold KubernetesController without ConsensusMember: the apiserver uses the node's local etcd", req.NodeId)
		}
		if proto.Equal(before, n.Roles) {
			return errUnchanged
		}
		return nil
	}, guard)
	if err != nil {
		return nil, err
	}
	switch {
	case removeMember && req.NodeId == m.cfg.Node.ID():
		// Removing this node's own member stops its etcd, and this
		// curator with it, before the answer could leave: remove it
		// just after answering.
		m.removeMemberAfterReply(req.NodeId)
	case removeMember:
		// The record says the node is no member any more; now make etcd
		// agree. Done on every such call, so that a retry after a failure
		// here finishes the removal.
		if err := m.removeMember(ctx, req.NodeId); err != nil {
			return nil, err
		}
	}
	return &api.UpdateNodeRolesResponse{Roles: n.Roles}, nil
}

// selfRemovalDelay is how long the curator waits, after answering, before
// it removes its own node from etcd's membership.
const selfRemovalDelay = time.Second

// removeMemberAfterReply removes node id, this curator's own, from etcd's
// membership once the answer to the call that asked for it has left. A
// failure is logged; calling UpdateNodeRoles again finishes the removal.
func (c *curator) removeMemberAfterReply(id string) {
	time.AfterFunc(selfRemovalDelay, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.removeMember(ctx, id); err != nil {
			c.log.Warningf("removing this node from the consensus members failed (remove the role again to retry): %v", err)
		}
	})
}

// role returns r when the role is held, nil otherwise.
func role[T any](held bool, r *T) *T {
	if held {
		return r
	}
	return nil
}

// removeMember removes node id from etcd's membership, if it is a member.
func (c *curator) removeMember(ctx context.Context, id string) error {
	err := c.cfg.Consensus.RemoveMember(ctx, id)
	if errors.Is(err, consensus.ErrNoMember) {
		// Held the role but never joined etcd, or removed before.
		return nil
	}
	if err != nil {
		return fmt.Errorf("when removing %s from the consensus members: %w", id, err)
	}
	return nil
}

func (m management) DecommissionNode(ctx context.Context, req *api.DecommissionNodeRequest) (*api.DecommissionNodeResponse, error) {
	if err := checkNodeID(req.NodeId); err != nil {
		return nil, err
	}
	_, err := m.updateNode(ctx, req.NodeId, func(n *private.Node) error {
		if n.FsmState == api.NodeState_NODE_STATE_DECOMMISSIONED {
			return errUnchanged
		}
		if n.GetRoles().GetConsensusMember() != nil {
			return status.Errorf(codes.FailedPrecondition, "node %s is a consensus member; remove its ConsensusMember role first", req.NodeId)
		}
		n.FsmState = api.NodeState_NODE_STATE_DECOMMISSIONED
		n.Roles = &api.NodeRoles{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.DecommissionNodeResponse{}, nil
}

func (m management) DeleteNode(ctx context.Context, req *api.DeleteNodeRequest) (*api.DeleteNodeResponse, error) {
	if err := checkNodeID(req.NodeId); err != nil {
		return nil, err
	}
	for {
		n, rev, err := m.getNode(ctx, req.NodeId)
		if err != nil {
			return nil, err
		}
		if n.FsmState != api.NodeState_NODE_STATE_DECOMMISSIONED && n.FsmState != api.NodeState_NODE_STATE_NEW {
			return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s; only a DECOMMISSIONED or NEW node can be deleted", req.NodeId, n.FsmState)
		}
		ok, err := m.deleteNode(ctx, req.NodeId, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			m.heartbeats.remove(req.NodeId)
			return &api.DeleteNodeResponse{}, nil
		}
	}
}

// UpdateRegistries implements Management.UpdateRegistries: the cluster
// configuration's registry settings replaced in one compare-and-swap, so
// that a concurrent change of the configuration is never lost. Workers
// follow through Curator.Watch.
func (m management) UpdateRegistries(ctx context.Context, req *api.UpdateRegistriesRequest) (*api.UpdateRegistriesResponse, error) {
	if err := clusterconfig.ValidateRegistries(req.GetRegistries()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "registries: %v", err)
	}
	for {
		conf, rev, err := m.configurationAt(ctx)
		if err != nil {
			return nil, err
		}
		conf.Registries = req.GetRegistries()
		if len(conf.Registries.GetMirrors()) == 0 && len(conf.Registries.GetPlainHttp()) == 0 {
			conf.Registries = nil
		}
		ok, err := m.putConfiguration(ctx, conf, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			return &api.UpdateRegistriesResponse{Registries: conf.GetRegistries()}, nil
		}
		// The configuration changed in between: apply to the new one.
	}
}
