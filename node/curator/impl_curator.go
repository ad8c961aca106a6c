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
	"strings"
	"time"
	"unicode"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// nodeAPI implements api.CuratorServer: the leader's part here, the
// streams (Watch, WatchOwnerTrust, GetCurrentLeader) in
// impl_curator_watch.go.
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
	if len(req.JoinKey) != ed25519.PublicKeySize {
		return nil, status.Errorf(codes.InvalidArgument, "join key is %d bytes, want %d", len(req.JoinKey), ed25519.PublicKeySize)
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
	// node joined it. The ticket, the configuration and the count are
	// one read: each read waits for etcd to confirm its leader, and a
	// registration is mostly waiting.
	var conf *api.ClusterConfiguration
	for attempt := 1; ; attempt++ {
		r, err := a.readRegistration(ctx, id)
		if err != nil {
			return nil, err
		}
		if sameRegistration(r.known, p.PublicKey, req.JoinKey) {
			// A node that registered before comes again with the same
			// keys: its answer was lost, or its power was cut before it
			// committed. Its keys are its proof, so a ticket rotated
			// since does not lock it out.
			if err := checkSecureBoot(r.conf, id, req.SecureBoot); err != nil {
				return nil, err
			}
			conf = r.conf
			break
		}
		if subtle.ConstantTimeCompare(r.ticket, req.RegisterTicket) != 1 {
			return nil, status.Error(codes.PermissionDenied, "wrong register ticket")
		}
		if err := checkSecureBoot(r.conf, id, req.SecureBoot); err != nil {
			return nil, err
		}
		conf = r.conf
		ok, kvs, err := a.createNode(ctx, id, data, r)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
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

// sameRegistration says whether known, the record stored under a
// registering node's ID, is that node's own registration: the same node
// and join keys, and not decommissioned.
func sameRegistration(known *private.Node, nodeKey, joinKey []byte) bool {
	return known != nil && known.FsmState != api.NodeState_NODE_STATE_DECOMMISSIONED &&
		bytes.Equal(known.PublicKey, nodeKey) && bytes.Equal(known.JoinKey, joinKey)
}

func (a nodeAPI) CommitNode(ctx context.Context, req *api.CommitNodeRequest) (*api.CommitNodeResponse, error) {
	p, err := selfSignedPeer(ctx, "CommitNode")
	if err != nil {
		return nil, err
	}
	id := identity.NodeID(p.PublicKey)
	if err := a.checkClock(); err != nil {
		return nil, err
	}
	ca, err := a.ca.Ensure(ctx, a.root)
	if err != nil {
		return nil, fmt.Errorf("when loading the cluster CA: %w", err)
	}
	cert := nodeCertificate(a.ca, p.PublicKey, a.opts.nodeLifetime)
	// The node goes UP in the transaction that stores its certificate,
	// so it is never UP without one. The record, the configuration and
	// the certificate are one read, and all that changes one write.
	for {
		v, err := a.readCommit(ctx, id, cert)
		if err != nil {
			return nil, err
		}
		n := v.node
		if !bytes.Equal(n.PublicKey, p.PublicKey) {
			return nil, status.Errorf(codes.PermissionDenied, "node %s is registered with another key", id)
		}
		if err := checkCommit(id, n); err != nil {
			return nil, err
		}
		if err := checkBoundSeal(v.conf, id, req.SealBound); err != nil {
			return nil, err
		}
		der, put, err := cert.Prepare(ctx, a.root, v.cert)
		if err != nil {
			return nil, fmt.Errorf("when issuing the certificate of node %s: %w", id, err)
		}
		var ops []clientv3.Op
		if put != nil {
			ops = append(ops, *put)
		}
		// An UP node committed already, by an earlier call whose answer
		// was lost or by a concurrent one: it is answered as that call was.
		if n.FsmState != api.NodeState_NODE_STATE_UP {
			n.FsmState = api.NodeState_NODE_STATE_UP
			n.SealsWithTpm = req.SealsWithTpm
			n.ClusterUnlockKey = nil
			if !insecure(v.conf) {
				n.ClusterUnlockKey = make([]byte, localstorage.KeySize)
				if _, err := rand.Read(n.ClusterUnlockKey); err != nil {
					return nil, fmt.Errorf("when drawing the cluster unlock key: %w", err)
				}
			}
			data, err := proto.Marshal(n)
			if err != nil {
				return nil, fmt.Errorf("when encoding node %s: %w", id, err)
			}
			ops = append(ops, clientv3.OpPut(v.nodeKey, string(data)))
		}
		if len(ops) > 0 {
			ok, err := a.writeCommit(ctx, id, v, ops)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue // the node or its certificate changed since the read
			}
		}
		return &api.CommitNodeResponse{CaCertificate: ca, NodeCertificate: der, ClusterUnlockKey: n.ClusterUnlockKey}, nil
	}
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
		return nil, rpc.Decommissioned(codes.FailedPrecondition, "node %s is decommissioned and may never join again", req.NodeId)
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s; only an UP node can join", req.NodeId, n.FsmState)
	}
	conf, err := a.configuration(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkJoinSealing(conf, n, req); err != nil {
		return nil, err
	}
	if err := checkSecureBoot(conf, req.NodeId, req.SecureBoot); err != nil {
		return nil, err
	}
	if err := checkBoundSeal(conf, req.NodeId, req.SealBound); err != nil {
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
// same answer. A decommissioned node's refusal says so (rpc.Decommissioned),
// so that it stops asking.
func checkCommit(id string, n *private.Node) error {
	switch n.FsmState {
	case api.NodeState_NODE_STATE_STANDBY, api.NodeState_NODE_STATE_UP:
		return nil
	case api.NodeState_NODE_STATE_DECOMMISSIONED:
		return rpc.Decommissioned(codes.FailedPrecondition, "node %s is decommissioned and may never commit again", id)
	}
	return status.Errorf(codes.FailedPrecondition, "node %s is %s; only a STANDBY (approved) node can commit", id, n.FsmState)
}

// checkJoinSealing refuses a node that comes back with its configuration
// stored plain although it sealed it with its TPM when it enrolled, or
// although the cluster requires TPM sealing: whoever can write a node's
// ESP could otherwise swap in a plain configuration of their own making.
// The node's own check (a marker in its TPM's NV memory) catches the same
// on a cold start, unless the TPM was cleared; this one does not depend on
// the TPM. conf is the cluster's configuration.
func checkJoinSealing(conf *api.ClusterConfiguration, n *private.Node, req *api.JoinNodeRequest) error {
	if req.UnsealedWithTpm {
		return nil
	}
	if n.SealsWithTpm {
		return status.Errorf(codes.PermissionDenied, "node %s sealed its configuration with its TPM when it enrolled, but came back with a plain one; refusing it (its ESP may have been tampered with)", req.NodeId)
	}
	if conf.GetTpmMode() == api.TPMMode_TPM_MODE_REQUIRED {
		return status.Errorf(codes.PermissionDenied, "the cluster requires TPM sealing, but node %s came back with a plain configuration; refusing it", req.NodeId)
	}
	return nil
}

// checkSecureBoot refuses node id, which says whether its firmware booted
// it under Secure Boot (secureBoot), when conf requires Secure Boot and it
// did not.
func checkSecureBoot(conf *api.ClusterConfiguration, id string, secureBoot bool) error {
	if conf.GetSecureBootRequired() && !secureBoot {
		return status.Errorf(codes.PermissionDenied, "the cluster requires Secure Boot, but node %s says its firmware did not boot it under Secure Boot; refusing it", id)
	}
	return nil
}

// checkBoundSeal refuses node id, which says whether its TPM seal is
// bound to signed releases and PCR 7 (bound), when conf requires that and
// it is not.
func checkBoundSeal(conf *api.ClusterConfiguration, id string, bound bool) error {
	if conf.GetBoundSealRequired() && !bound {
		return status.Errorf(codes.PermissionDenied, "the cluster requires a seal bound to signed releases, but node %s says its seal is not; refusing it", id)
	}
	return nil
}

// checkNodeStatus refuses, with InvalidArgument naming the field, a status
// a node may not store: the curator and every node read it.
func checkNodeStatus(st *api.NodeStatus) error {
	now := time.Now()
	if st == nil {
		return status.Error(codes.InvalidArgument, "status is missing")
	}
	if size := proto.Size(st); size > maxStatusSize {
		return status.Errorf(codes.InvalidArgument, "status is %d bytes, more than %d", size, maxStatusSize)
	}
	if a := st.ExternalAddress; a != "" {
		addr, err := netip.ParseAddr(a)
		switch {
		case err != nil:
			return status.Errorf(codes.InvalidArgument, "status.external_address %q is not an IP address", a)
		case addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast():
			return status.Errorf(codes.InvalidArgument, "status.external_address %q is not an address other nodes can reach", a)
		}
	}
	if v := st.Version; len(v) > maxVersionLength {
		return status.Errorf(codes.InvalidArgument, "status.version is %d bytes, more than %d", len(v), maxVersionLength)
	} else if !printable(v) {
		return status.Errorf(codes.InvalidArgument, "status.version %q is not printable ASCII", v)
	}
	if _, err := localstorage.ParseSlot(st.SystemSlot); err != nil && st.SystemSlot != "" {
		return status.Errorf(codes.InvalidArgument, "status.system_slot: %v", err)
	}
	if rc := st.RunningCurator; rc != nil && (rc.Port < 1 || rc.Port > 65535) {
		return status.Errorf(codes.InvalidArgument, "status.running_curator.port %d is not a TCP port (1 to 65535)", rc.Port)
	}
	if err := checkStatusTime("status.timestamp_unix_nanos", st.TimestampUnixNanos, now); err != nil {
		return err
	}
	if err := checkUpdateStatus(st.Update); err != nil {
		return err
	}
	return checkClockStatus(st.Clock, now)
}

// maxUpdateReason is the longest reason of a failed update the curator
// stores.
const maxUpdateReason = 512

// checkUpdateStatus refuses an update status with values no node sends.
func checkUpdateStatus(u *api.UpdateStatus) error {
	if u == nil {
		return nil
	}
	if _, ok := api.UpdatePhase_name[int32(u.Phase)]; !ok {
		return status.Errorf(codes.InvalidArgument, "status.update.phase %d is not an update phase", u.Phase)
	}
	if len(u.Reason) > maxUpdateReason {
		return status.Errorf(codes.InvalidArgument, "status.update.reason is %d bytes, more than %d", len(u.Reason), maxUpdateReason)
	}
	return nil
}

// checkClockStatus refuses a clock status with values no node sends.
func checkClockStatus(c *api.ClockStatus, now time.Time) error {
	if c == nil {
		return nil
	}
	if _, ok := api.ClockState_name[int32(c.State)]; !ok {
		return status.Errorf(codes.InvalidArgument, "status.clock.state %d is not a clock state", c.State)
	}
	if s := c.Server; s != "" {
		addr, err := netip.ParseAddr(s)
		if err != nil || addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
			return status.Errorf(codes.InvalidArgument, "status.clock.server %q is not a server's IP address", s)
		}
	}
	if err := checkStatusTime("status.clock.last_sync_unix_nanos", c.LastSyncUnixNanos, now); err != nil {
		return err
	}
	// Protobuf refuses strings that are not UTF-8; what is left to refuse
	// is what would garble a terminal or a log.
	if r := c.Reason; len(r) > maxClockReasonLength {
		return status.Errorf(codes.InvalidArgument, "status.clock.reason is %d bytes, more than %d", len(r), maxClockReasonLength)
	} else if strings.IndexFunc(r, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
		return status.Errorf(codes.InvalidArgument, "status.clock.reason %q is not printable text", r)
	}
	return nil
}

// checkStatusTime refuses a time of a node's status (nanoseconds since the
// Unix epoch, by the node's clock) before 1970 or far ahead of now.
func checkStatusTime(field string, ts int64, now time.Time) error {
	if ts < 0 {
		return status.Errorf(codes.InvalidArgument, "%s %d is before 1970", field, ts)
	} else if t := time.Unix(0, ts); t.After(now.Add(maxStatusClockSkew)) {
		return status.Errorf(codes.InvalidArgument, "%s is %s, more than %s ahead of the curator's clock (%s)", field, t.UTC().Format(time.RFC3339), maxStatusClockSkew, now.UTC().Format(time.RFC3339))
	}
	return nil
}

// printable says whether s is printable ASCII, spaces included.
func printable(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r > '~' }) < 0
}

// Heartbeat implements Curator.Heartbeat.
func (a nodeAPI) Heartbeat(ctx context.Context, _ *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	a.heartbeats.beat(p.NodeID, time.Now())
	return &api.HeartbeatResponse{IntervalMillis: a.opts.heartbeatInterval.Milliseconds()}, nil
}

// nodePeer returns the calling node, which the method's class NODE made
// sure of.
func nodePeer(ctx context.Context) (identity.Peer, error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerNode {
		return identity.Peer{}, status.Error(codes.Unauthenticated, "the caller is not a node")
	}
	return p, nil
}

// selfSignedPeer returns the key the caller proved to hold with a
// self-signed certificate, or Unauthenticated.
func selfSignedPeer(ctx context.Context, method string) (identity.Peer, error) {
	p, ok := rpc.PeerFromContext(ctx)
	if !ok || p.Kind != identity.PeerSelfSigned {
		return identity.Peer{}, status.Errorf(codes.Unauthenticated, "%s needs a self-signed certificate of the caller's key in the TLS handshake", method)
	}
	return p, nil
}
