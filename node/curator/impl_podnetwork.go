package curator

import (
	"context"
	"errors"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// wireguardKeySize is the size of a WireGuard public key (Curve25519).
const wireguardKeySize = 32

// SetPodNetwork stores the WireGuard key and pod range of the calling
// worker, once it has checked the range against the one Kubernetes
// assigned to the worker's Node, or the key alone of a controller. Every
// node programs its tunnel's peers from what the nodes published, so a
// node can claim only its own range: were it to claim another's, that
// node's pods' traffic would go to it.
func (a nodeAPI) SetPodNetwork(ctx context.Context, req *api.SetPodNetworkRequest) (*api.SetPodNetworkResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	pn := req.GetPodNetwork()
	if len(pn.GetWireguardPublicKey()) != wireguardKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "the WireGuard public key has %d bytes, want %d", len(pn.GetWireguardPublicKey()), wireguardKeySize)
	}
	if pn.GetPodRange() == "" {
		// A controller that is no worker has no pods: it joins the
		// tunnel to reach the workers' pods, from its own address.
		if _, err := a.requireKubernetesRole(ctx, p.NodeID, true); err != nil {
			return nil, err
		}
		return a.storePodNetwork(ctx, p.NodeID, pn)
	}
	r, err := netip.ParsePrefix(pn.GetPodRange())
	if err != nil || r != r.Masked() {
		return nil, status.Errorf(codes.InvalidArgument, "the pod range %q is not a network address and prefix length", pn.GetPodRange())
	}
	if _, err := a.requireKubernetesRole(ctx, p.NodeID, false); err != nil {
		return nil, err
	}
	assigned, err := kubernetes.AssignedPodRange(ctx, a.root, p.NodeID)
	if errors.Is(err, kubernetes.ErrNoPodRange) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "when checking the pod range of node %s: %v", p.NodeID, err)
	}
	if assigned != r {
		return nil, status.Errorf(codes.FailedPrecondition, "Kubernetes assigned node %s the pod range %s, not %s", p.NodeID, assigned, r)
	}
	if err := a.releasePodRange(ctx, p.NodeID, r); err != nil {
		return nil, err
	}
	return a.storePodNetwork(ctx, p.NodeID, pn)
}

// storePodNetwork stores pn in the record of node id.
func (c *curator) storePodNetwork(ctx context.Context, id string, pn *api.PodNetwork) (*api.SetPodNetworkResponse, error) {
	_, err := c.updateNode(ctx, id, func(n *private.Node) error {
		if proto.Equal(n.PodNetwork, pn) {
			return errUnchanged
		}
		n.PodNetwork = pn
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.SetPodNetworkResponse{}, nil
}

// releasePodRange takes range r from every node other than id that
// published it: Kubernetes gave it to id since, so the other nodes' Nodes
// were deleted, and their pods are gone.
func (c *curator) releasePodRange(ctx context.Context, id string, r netip.Prefix) error {
	nodes, _, err := c.listNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		other := identity.NodeID(n.PublicKey)
		if other == id || n.GetPodNetwork().GetPodRange() != r.String() {
			continue
		}
		_, err := c.updateNode(ctx, other, func(n *private.Node) error {
			if n.GetPodNetwork().GetPodRange() != r.String() {
				return errUnchanged
			}
			n.PodNetwork = nil
			return nil
		})
		if err != nil {
			return err
		}
		c.log.Infof("Node %s published pod range %s, which node %s held before: %s no longer has one", id, r, other, other)
	}
	return nil
}
