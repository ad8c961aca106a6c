package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// nodeAPI implements api.CuratorServer: the leader's part here, Watch in
// watch.go, GetCurrentLeader in election.go.
type nodeAPI struct {
	api.UnimplementedCuratorServer
	*curator
}

func (a nodeAPI) UpdateNodeStatus(ctx context.Context, req *api.UpdateNodeStatusRequest) (*api.UpdateNodeStatusResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	if req.NodeId != p.NodeID {
		return nil, status.Errorf(codes.PermissionDenied, "node %s may update only its own status, not that of %q", p.NodeID, req.NodeId)
	}
	if err := checkNodeStatus(req.Status); err != nil {
		return nil, err
	}
	if err := a.allowStatusWrite(p.NodeID); err != nil {
		return nil, err
	}
	_, err = a.updateNode(ctx, p.NodeID, func(n *private.Node) error {
		if proto.Equal(n.Status, req.Status) {
			return errUnchanged
		}
		n.Status = req.Status
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.UpdateNodeStatusResponse{}, nil
}

func (a nodeAPI) RegisterNode(ctx context.Context, req *api.RegisterNodeRequest) (*api.RegisterNodeResponse, error) {
	p, err := selfSignedPeer(ctx, "RegisterNode")
	if err != nil {
		return nil, err
	}
	if err := a.allowRegistration(ctx); err != nil {
		return nil, err
	}
	ticket, err := a.registerTicket(ctx)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(ticket, req.RegisterTicket) != 1 {
		return nil, status.Error(codes.PermissionDenied, "wrong register ticket")
	}
	if len(req.JoinKey) != ed25519.PublicKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "join key is %d bytes, want %d", len(req.JoinKey), ed25519.PublicKeySize)
	}
	conf, err := a.configuration(ctx)
	if err != nil {
		return nil, err
	}
	id := identity.NodeID(p.PublicKey)
	data, err := proto.Marshal(&private.Node{
		PublicKey: p.PublicKey,
		JoinKey:   req.JoinKey,
		FsmState:  api.NodeState_NODE_STATE_NEW,
		Roles:     &api.NodeRoles{},
	})
	if err != nil {
		return nil, fmt.Errorf("when encoding node %s: %w", id, err)
	}
	select {
	case a.registering <- struct{}{}:
		defer func() { <-a.registering }()
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	// Near the cap, the count of nodes waiting for approval holds only
	// while no other node registers: the write then also compares the
	// waiting index's revision with the count's, and counts again when a
	// node joined it.
	for attempt := 1; ; attempt++ {
		rev, far, err := a.roomForNew(ctx, id)
		if err != nil {
			return nil, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(nodeKey(id)), "=", 0)}
		if !far {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(waitingPrefix).WithPrefix(), "<", rev+1))
		}
		resp, err := a.etcd.Txn(ctx).
			If(cmps...).
			Then(clientv3.OpPut(nodeKey(id), string(data)), clientv3.OpPut(waitingKey(id), "")).
			Else(clientv3.OpGet(nodeKey(id))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("when registering node %s: %w", id, err)
		}
		if resp.Succeeded {
			break
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 && attempt < registerAttempts {
			continue // another node changed since the count
		}
		have := &private.Node{}
		if len(kvs) != 1 || proto.Unmarshal(kvs[0].Value, have) != nil {
			return nil, status.Errorf(codes.Aborted, "node %s: the nodes changed while registering; retry", id)
		}
		if !bytes.Equal(have.PublicKey, p.PublicKey) || !bytes.Equal(have.JoinKey, req.JoinKey) {
			return nil, status.Errorf(codes.AlreadyExists, "node %s is already registered with other keys", id)
		}
		break
	}
	return &api.RegisterNodeResponse{ClusterConfiguration: conf}, nil
}

func (a nodeAPI) CommitNode(ctx context.Context, req *api.CommitNodeRequest) (*api.CommitNodeResponse, error) {
	p, err := selfSignedPeer(ctx, "CommitNode")
	if err != nil {
		return nil, err
	}
	id := identity.NodeID(p.PublicKey)
	n, _, err := a.getNode(ctx, id)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(n.PublicKey, p.PublicKey) {
		return nil, status.Errorf(codes.PermissionDenied, "node %s is registered with another key", id)
	}
	if err := checkCommit(id, n); err != nil {
		return nil, err
	}
	conf, err := a.configuration(ctx)
	if err != nil {
		return nil, err
	}
	// The certificate first: issuing it again is harmless (a node that
	// has one gets the stored one), and the node must not end up UP
	// without one.
	cert, ca, err := a.issueNode(ctx, p.PublicKey)
	if err != nil {
		return nil, err
	}
	// Used only if this call is the one that commits.
	var unlock []byte
	if !insecure(conf) {
		unlock = make([]byte, localstorage.KeySize)
		if _, err := rand.Read(unlock); err != nil {
			return nil, fmt.Errorf("when drawing the cluster unlock key: %w", err)
		}
	}
	n, err = a.updateNode(ctx, id, func(n *private.Node) error {
		if err := checkCommit(id, n); err != nil {
			return err
		}
		if n.FsmState == api.NodeState_NODE_STATE_UP {
			// Committed already, by an earlier call whose answer was
			// lost or by a concurrent one: answer as it did.
			return errUnchanged
		}
		n.FsmState = api.NodeState_NODE_STATE_UP
		n.ClusterUnlockKey = unlock
		n.SealsWithTpm = req.SealsWithTpm
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &api.CommitNodeResponse{CaCertificate: ca, NodeCertificate: cert, ClusterUnlockKey: n.ClusterUnlockKey}, nil
}

func (a nodeAPI) JoinNode(ctx context.Context, req *api.JoinNodeRequest) (*api.JoinNodeResponse, error) {
	p, err := selfSignedPeer(ctx, "JoinNode")
	if err != nil {
		return nil, err
	}
	if err := checkNodeID(req.NodeId); err != nil {
		return nil, err
	}
	n, _, err := a.getNode(ctx, req.NodeId)
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare(n.JoinKey, p.PublicKey) != 1 {
		return nil, status.Errorf(codes.PermissionDenied, "the caller's key is not the join key of node %s", req.NodeId)
	}
	switch n.FsmState {
	case api.NodeState_NODE_STATE_UP:
	case api.NodeState_NODE_STATE_DECOMMISSIONED:
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is decommissioned and may never join again", req.NodeId)
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s; only an UP node can join", req.NodeId, n.FsmState)
	}
	if err := a.checkJoinSealing(ctx, n, req); err != nil {
		return nil, err
	}
	// A node powered off for longer than half its certificate's
	// lifetime comes back with one it could not renew: it gets a fresh
	// one here, which the join key entitles it to as much as the
	// unlock key.
	cert, _, err := a.issueNode(ctx, n.PublicKey)
	if err != nil {
		return nil, err
	}
	return &api.JoinNodeResponse{ClusterUnlockKey: n.ClusterUnlockKey, NodeCertificate: cert}, nil
}

func (a nodeAPI) IssueCertificate(ctx context.Context, req *api.IssueCertificateRequest) (*api.IssueCertificateResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := kubernetesKinds[req.Kind]; ok {
		return a.issueKubernetes(ctx, p.NodeID, req.Kind, req.PublicKey)
	}
	if req.Kind != api.CertificateKind_CERTIFICATE_KIND_NODE {
		return nil, status.Errorf(codes.InvalidArgument, "cannot issue certificates of kind %s", req.Kind)
	}
	if len(req.PublicKey) > 0 {
		return nil, status.Error(codes.InvalidArgument, "a node certificate is for the key of the caller's TLS certificate: the request must carry no public key")
	}
	if err := a.requireUp(ctx, p.NodeID); err != nil {
		return nil, err
	}
	cert, ca, err := a.issueNode(ctx, p.PublicKey)
	if err != nil {
		return nil, err
	}
	return &api.IssueCertificateResponse{Certificate: cert, CaCertificate: ca}, nil
}

// requireUp refuses, with FailedPrecondition, a node that is not UP.
func (c *curator) requireUp(ctx context.Context, id string) error {
	n, _, err := c.getNode(ctx, id)
	if err != nil {
		return err
	}
	if n.FsmState != api.NodeState_NODE_STATE_UP {
		return status.Errorf(codes.FailedPrecondition, "node %s is %s, not UP", id, n.FsmState)
	}
	return nil
}

func (a nodeAPI) JoinConsensus(ctx context.Context, req *api.JoinConsensusRequest) (*api.JoinConsensusResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddr(req.PeerAddress)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "peer address %q is not an IP address: %v", req.PeerAddress, err)
	}
	n, _, err := a.getNode(ctx, p.NodeID)
	if err != nil {
		return nil, err
	}
	if n.FsmState != api.NodeState_NODE_STATE_UP || n.GetRoles().GetConsensusMember() == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s does not hold the ConsensusMember role", p.NodeID)
	}
	url := "https://" + net.JoinHostPort(addr.String(), strconv.Itoa(a.opts.peerPort(p.NodeID)))
	j, err := a.cfg.Consensus.AddLearner(ctx, p.NodeID, url, p.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("when adding %s as a learner at %s: %w", p.NodeID, url, err)
	}
	return &api.JoinConsensusResponse{
		InitialCluster:  j.InitialCluster,
		Peers:           j.Peers,
		CaCertificate:   j.CACertificate,
		Crl:             j.CRL,
		PeerCertificate: j.PeerCertificate,
	}, nil
}

// checkCommit refuses, with FailedPrecondition, to commit node id, whose
// record is n, unless it is STANDBY or already UP: a node whose commit
// answer was lost (a power cut, the network) commits again, and gets the
// same answer.
func checkCommit(id string, n *private.Node) error {
	switch n.FsmState {
	case api.NodeState_NODE_STATE_STANDBY, api.NodeState_NODE_STATE_UP:
		return nil
	case api.NodeState_NODE_STATE_DECOMMISSIONED:
		return status.Errorf(codes.FailedPrecondition, "node %s is decommissioned and may never commit again", id)
	}
	return status.Errorf(codes.FailedPrecondition, "node %s is %s; only a STANDBY (approved) node can commit", id, n.FsmState)
}

// checkJoinSealing refuses a node that comes back with its configuration
// stored plain although it sealed it with its TPM when it enrolled, or
// although the cluster requires TPM sealing: whoever can write a node's
// ESP could otherwise swap in a plain configuration of their own making.
// The node's own check (a marker in its TPM's NV memory) catches the same
// on a cold start, unless the TPM was cleared; this one does not depend on
// the TPM.
func (c *curator) checkJoinSealing(ctx context.Context, n *private.Node, req *api.JoinNodeRequest) error {
	if req.UnsealedWithTpm {
		return nil
	}
	if n.SealsWithTpm {
		return status.Errorf(codes.PermissionDenied, "node %s sealed its configuration with its TPM when it enrolled, but came back with a plain one; refusing it (its ESP may have been tampered with)", req.NodeId)
	}
	conf, err := c.configuration(ctx)
	if err != nil {
		return err
	}
	if conf.GetTpmMode() == api.TPMMode_TPM_MODE_REQUIRED {
		return status.Errorf(codes.PermissionDenied, "the cluster requires TPM sealing, but node %s came back with a plain configuration; refusing it", req.NodeId)
	}
	return nil
}
