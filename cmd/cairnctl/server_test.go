package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// testServer is a stand-in cluster for the commands the curator does not
// cover (NodeManagement) and for servers that misbehave: AAA, Management
// and NodeManagement over a real node/rpc server on loopback, with state
// in memory.
type testServer struct {
	api.UnimplementedAAAServer
	api.UnimplementedManagementServer
	api.UnimplementedNodeManagementServer

	ca    *identitytest.CA
	owner ed25519.PublicKey
	// ident is the node identity the server answers with.
	ident *identity.Node
	// escrowCA, when set, is the CA certificate Escrow returns instead of
	// ca's, as a server of another cluster would.
	escrowCA *identitytest.CA
	// hang makes GetNodes answer only when the call ends, as a curator
	// that forwards to a dead leader does.
	hang bool
	// backup is what Backup streams, and backupTrailer, when set, the
	// trailer it ends with instead of the one that describes backup.
	backup        []byte
	backupTrailer *api.BackupTrailer
	addr          string

	mu       sync.Mutex
	nodes    []*api.Node
	logs     []*api.LogEntry
	lastLogs *api.LogsRequest
	reboots  int
}

// startTestServer serves s on a loopback port with a node identity of
// s.ca until the test ends.
func startTestServer(t *testing.T, s *testServer) {
	t.Helper()
	s.ident = s.ca.Node(t)
	srv := rpc.NewServer(s.ident)
	api.RegisterAAAServer(srv, s)
	api.RegisterManagementServer(srv, s)
	api.RegisterNodeManagementServer(srv, s)
	s.addr = serve(t, srv)
}

// serve serves srv on a loopback port until the test ends, and returns
// the port's address.
func serve(t *testing.T, srv *rpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, lis)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return lis.Addr().String()
}

func (s *testServer) Escrow(srv grpc.BidiStreamingServer[api.EscrowFromClient, api.EscrowFromServer]) error {
	msg, err := srv.Recv()
	if err != nil {
		return err
	}
	pub := ed25519.PublicKey(msg.GetHello().GetOwnerPublicKey())
	if !pub.Equal(s.owner) {
		return status.Error(codes.PermissionDenied, "the key is not the cluster owner's")
	}
	nonce := make([]byte, rpc.EscrowNonceSize)
	rand.Read(nonce)
	challenge := &api.EscrowFromServer_Challenge{Nonce: nonce}
	if err := srv.Send(&api.EscrowFromServer{Step: &api.EscrowFromServer_Challenge_{Challenge: challenge}}); err != nil {
		return err
	}
	msg, err = srv.Recv()
	if err != nil {
		return err
	}
	cs, _ := rpc.TLSConnectionState(srv.Context())
	payload, err := rpc.EscrowProofPayload(nonce, cs)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if !ed25519.Verify(s.owner, payload, msg.GetProof().GetSignature()) {
		return status.Error(codes.PermissionDenied, "bad proof")
	}
	ca := s.ca
	if s.escrowCA != nil {
		ca = s.escrowCA
	}
	cert, err := ca.Sign(identity.OwnerCertificateTemplate(), s.owner, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	result := &api.EscrowFromServer_Result{OwnerCertificate: cert, CaCertificate: ca.DER()}
	return srv.Send(&api.EscrowFromServer{Step: &api.EscrowFromServer_Result_{Result: result}})
}

func (s *testServer) GetRegisterTicket(context.Context, *api.GetRegisterTicketRequest) (*api.GetRegisterTicketResponse, error) {
	return &api.GetRegisterTicketResponse{Ticket: []byte("ticket")}, nil
}

func (s *testServer) GetClusterInfo(context.Context, *api.GetClusterInfoRequest) (*api.GetClusterInfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := &api.ClusterDirectory{}
	for _, n := range s.nodes {
		if n.GetRoles().GetConsensusMember() != nil {
			dir.Nodes = append(dir.Nodes, &api.ClusterDirectory_Node{
				Id:        n.Id,
				PublicKey: n.PublicKey,
				Addresses: []*api.ClusterDirectory_Node_Address{{Host: n.GetStatus().GetExternalAddress()}},
			})
		}
	}
	return &api.GetClusterInfoResponse{
		ClusterDirectory: dir,
		CaCertificate:    s.ca.DER(),
		ClusterConfiguration: &api.ClusterConfiguration{
			StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED,
			TpmMode:               api.TPMMode_TPM_MODE_BEST_EFFORT,
		},
	}, nil
}

func (s *testServer) GetNodes(ctx context.Context, req *api.GetNodesRequest) (*api.GetNodesResponse, error) {
	if s.hang {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &api.GetNodesResponse{}
	for _, n := range s.nodes {
		if ids := req.GetFilter().GetIds(); len(ids) == 0 || slices.Contains(ids, n.Id) {
			res.Nodes = append(res.Nodes, proto.Clone(n).(*api.Node))
		}
	}
	return res, nil
}

func (s *testServer) node(id string) (*api.Node, error) {
	for _, n := range s.nodes {
		if n.Id == id {
			return n, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no node %s", id)
}

func (s *testServer) ApproveNode(_ context.Context, req *api.ApproveNodeRequest) (*api.ApproveNodeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.node(req.NodeId)
	if err != nil {
		return nil, err
	}
	if n.State != api.NodeState_NODE_STATE_NEW {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s", n.Id, n.State)
	}
	n.State = api.NodeState_NODE_STATE_STANDBY
	return &api.ApproveNodeResponse{}, nil
}

func (s *testServer) UpdateNodeRoles(_ context.Context, req *api.UpdateNodeRolesRequest) (*api.UpdateNodeRolesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.node(req.NodeId)
	if err != nil {
		return nil, err
	}
	if n.Roles == nil {
		n.Roles = &api.NodeRoles{}
	}
	if req.ConsensusMember != nil {
		n.Roles.ConsensusMember = nil
		if *req.ConsensusMember {
			n.Roles.ConsensusMember = &api.NodeRoles_ConsensusMember{}
		}
	}
	if req.KubernetesWorker != nil {
		n.Roles.KubernetesWorker = nil
		if *req.KubernetesWorker {
			n.Roles.KubernetesWorker = &api.NodeRoles_KubernetesWorker{}
		}
	}
	return &api.UpdateNodeRolesResponse{Roles: proto.Clone(n.Roles).(*api.NodeRoles)}, nil
}

func (s *testServer) Logs(req *api.LogsRequest, srv grpc.ServerStreamingServer[api.LogsResponse]) error {
	s.mu.Lock()
	s.lastLogs = req
	entries := s.logs
	s.mu.Unlock()
	if err := srv.Send(&api.LogsResponse{Entries: entries}); err != nil {
		return err
	}
	if req.Follow {
		// Nothing new is ever logged here; follow until the caller
		// goes away.
		<-srv.Context().Done()
	}
	return nil
}

func (s *testServer) Reboot(context.Context, *api.RebootRequest) (*api.RebootResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reboots++
	return &api.RebootResponse{}, nil
}

// bootstrapped makes a config dir with an owner key, and a test server of
// a cluster owned by it holding nodes.
func bootstrapped(t *testing.T, nodes ...*api.Node) (string, *testServer) {
	t.Helper()
	dir := t.TempDir()
	key, _, err := ensureOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{ca: identitytest.NewCA(t, "test cluster CA"), owner: key.Public().(ed25519.PublicKey), nodes: nodes}
	startTestServer(t, s)
	return dir, s
}

// setNodes replaces the nodes the server holds.
func (s *testServer) setNodes(nodes ...*api.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = nodes
}
