package rpc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/proto/api"
)

// The services below test the authorization layer, not the services: each
// method returns an empty success, after telling the caller in a response
// header which peer PeerFromContext gave it. A method the test forgets to
// override answers Unimplemented, which the matrix reports as a failure.

// peerHeader names the response header carrying the peer a handler saw.
const peerHeader = "test-peer"

// announcePeer sends the caller, as a header, the kind and node ID of the
// peer PeerFromContext returns, and fails the call when there is none.
func announcePeer(ctx context.Context, setHeader func(metadata.MD) error) error {
	p, ok := PeerFromContext(ctx)
	if !ok {
		return status.Error(codes.Internal, "handler found no peer in its context")
	}
	return setHeader(metadata.Pairs(peerHeader, p.Kind.String()+" "+p.NodeID))
}

func unaryPeer(ctx context.Context) error {
	return announcePeer(ctx, func(md metadata.MD) error { return grpc.SetHeader(ctx, md) })
}

func streamPeer(ss grpc.ServerStream) error {
	return announcePeer(ss.Context(), ss.SetHeader)
}

type testAAA struct{ api.UnimplementedAAAServer }

func (testAAA) Escrow(srv grpc.BidiStreamingServer[api.EscrowFromClient, api.EscrowFromServer]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.EscrowFromServer{})
}

type testManagement struct {
	api.UnimplementedManagementServer
}

func (testManagement) GetRegisterTicket(ctx context.Context, _ *api.GetRegisterTicketRequest) (*api.GetRegisterTicketResponse, error) {
	return &api.GetRegisterTicketResponse{}, unaryPeer(ctx)
}

func (testManagement) RotateRegisterTicket(ctx context.Context, _ *api.RotateRegisterTicketRequest) (*api.RotateRegisterTicketResponse, error) {
	return &api.RotateRegisterTicketResponse{}, unaryPeer(ctx)
}

func (testManagement) GetClusterInfo(ctx context.Context, _ *api.GetClusterInfoRequest) (*api.GetClusterInfoResponse, error) {
	return &api.GetClusterInfoResponse{}, unaryPeer(ctx)
}

func (testManagement) GetNodes(ctx context.Context, _ *api.GetNodesRequest) (*api.GetNodesResponse, error) {
	return &api.GetNodesResponse{}, unaryPeer(ctx)
}

func (testManagement) ApproveNode(ctx context.Context, _ *api.ApproveNodeRequest) (*api.ApproveNodeResponse, error) {
	return &api.ApproveNodeResponse{}, unaryPeer(ctx)
}

func (testManagement) UpdateNodeRoles(ctx context.Context, _ *api.UpdateNodeRolesRequest) (*api.UpdateNodeRolesResponse, error) {
	return &api.UpdateNodeRolesResponse{}, unaryPeer(ctx)
}

func (testManagement) DecommissionNode(ctx context.Context, _ *api.DecommissionNodeRequest) (*api.DecommissionNodeResponse, error) {
	return &api.DecommissionNodeResponse{}, unaryPeer(ctx)
}

func (testManagement) DeleteNode(ctx context.Context, _ *api.DeleteNodeRequest) (*api.DeleteNodeResponse, error) {
	return &api.DeleteNodeResponse{}, unaryPeer(ctx)
}

func (testManagement) Backup(_ *api.BackupRequest, srv grpc.ServerStreamingServer[api.BackupResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.BackupResponse{})
}

func (testManagement) RotateOwnerKey(srv grpc.ClientStreamingServer[api.RotateOwnerKeyRequest, api.RotateOwnerKeyResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	if _, err := srv.Recv(); err != nil {
		return err
	}
	return srv.SendAndClose(&api.RotateOwnerKeyResponse{})
}

func (testManagement) RevokeOwnerCertificate(ctx context.Context, _ *api.RevokeOwnerCertificateRequest) (*api.RevokeOwnerCertificateResponse, error) {
	return &api.RevokeOwnerCertificateResponse{}, unaryPeer(ctx)
}

func (testManagement) GetOwnerTrust(ctx context.Context, _ *api.GetOwnerTrustRequest) (*api.GetOwnerTrustResponse, error) {
	return &api.GetOwnerTrustResponse{}, unaryPeer(ctx)
}

func (testManagement) IssueKubernetesCredential(ctx context.Context, _ *api.IssueKubernetesCredentialRequest) (*api.IssueKubernetesCredentialResponse, error) {
	return &api.IssueKubernetesCredentialResponse{}, unaryPeer(ctx)
}

func (testManagement) UpdateRegistries(ctx context.Context, _ *api.UpdateRegistriesRequest) (*api.UpdateRegistriesResponse, error) {
	return &api.UpdateRegistriesResponse{}, unaryPeer(ctx)
}

func (testManagement) UpdateReleaseKeys(ctx context.Context, _ *api.UpdateReleaseKeysRequest) (*api.UpdateReleaseKeysResponse, error) {
	return &api.UpdateReleaseKeysResponse{}, unaryPeer(ctx)
}

func (testManagement) IssueMetricsCertificate(ctx context.Context, _ *api.IssueMetricsCertificateRequest) (*api.IssueMetricsCertificateResponse, error) {
	return &api.IssueMetricsCertificateResponse{}, unaryPeer(ctx)
}

func (testManagement) StartRollout(ctx context.Context, _ *api.StartRolloutRequest) (*api.Rollout, error) {
	return &api.Rollout{}, unaryPeer(ctx)
}

func (testManagement) GetRollout(ctx context.Context, _ *api.GetRolloutRequest) (*api.GetRolloutResponse, error) {
	return &api.GetRolloutResponse{}, unaryPeer(ctx)
}

func (testManagement) AbortRollout(ctx context.Context, _ *api.AbortRolloutRequest) (*api.Rollout, error) {
	return &api.Rollout{}, unaryPeer(ctx)
}

func (testManagement) ClearBadRelease(ctx context.Context, _ *api.ClearBadReleaseRequest) (*api.ClearBadReleaseResponse, error) {
	return &api.ClearBadReleaseResponse{}, unaryPeer(ctx)
}

type testCurator struct{ api.UnimplementedCuratorServer }

func (testCurator) WatchOwnerTrust(_ *api.WatchOwnerTrustRequest, srv grpc.ServerStreamingServer[api.WatchOwnerTrustResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.WatchOwnerTrustResponse{})
}

func (testCurator) Watch(_ *api.WatchRequest, srv grpc.ServerStreamingServer[api.WatchEvent]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.WatchEvent{})
}

func (testCurator) UpdateNodeStatus(ctx context.Context, _ *api.UpdateNodeStatusRequest) (*api.UpdateNodeStatusResponse, error) {
	return &api.UpdateNodeStatusResponse{}, unaryPeer(ctx)
}

func (testCurator) Heartbeat(ctx context.Context, _ *api.HeartbeatRequest) (*api.HeartbeatResponse, error) {
	return &api.HeartbeatResponse{}, unaryPeer(ctx)
}

func (testCurator) RegisterNode(ctx context.Context, _ *api.RegisterNodeRequest) (*api.RegisterNodeResponse, error) {
	return &api.RegisterNodeResponse{}, unaryPeer(ctx)
}

func (testCurator) CommitNode(ctx context.Context, _ *api.CommitNodeRequest) (*api.CommitNodeResponse, error) {
	return &api.CommitNodeResponse{}, unaryPeer(ctx)
}

func (testCurator) JoinNode(ctx context.Context, _ *api.JoinNodeRequest) (*api.JoinNodeResponse, error) {
	return &api.JoinNodeResponse{}, unaryPeer(ctx)
}

func (testCurator) IssueCertificate(ctx context.Context, _ *api.IssueCertificateRequest) (*api.IssueCertificateResponse, error) {
	return &api.IssueCertificateResponse{}, unaryPeer(ctx)
}

func (testCurator) GetCurrentLeader(_ *api.GetCurrentLeaderRequest, srv grpc.ServerStreamingServer[api.GetCurrentLeaderResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.GetCurrentLeaderResponse{})
}

func (testCurator) JoinConsensus(ctx context.Context, _ *api.JoinConsensusRequest) (*api.JoinConsensusResponse, error) {
	return &api.JoinConsensusResponse{}, unaryPeer(ctx)
}

func (testCurator) GetKubernetesServiceAccountKey(ctx context.Context, _ *api.GetKubernetesServiceAccountKeyRequest) (*api.GetKubernetesServiceAccountKeyResponse, error) {
	return &api.GetKubernetesServiceAccountKeyResponse{}, unaryPeer(ctx)
}

func (testCurator) SetPodNetwork(ctx context.Context, _ *api.SetPodNetworkRequest) (*api.SetPodNetworkResponse, error) {
	return &api.SetPodNetworkResponse{}, unaryPeer(ctx)
}

type testNodeManagement struct {
	api.UnimplementedNodeManagementServer
}

func (testNodeManagement) Logs(_ *api.LogsRequest, srv grpc.ServerStreamingServer[api.LogsResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.LogsResponse{})
}

func (testNodeManagement) Reboot(ctx context.Context, _ *api.RebootRequest) (*api.RebootResponse, error) {
	return &api.RebootResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) Poweroff(ctx context.Context, _ *api.PoweroffRequest) (*api.PoweroffResponse, error) {
	return &api.PoweroffResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) GetResources(ctx context.Context, _ *api.GetResourcesRequest) (*api.GetResourcesResponse, error) {
	return &api.GetResourcesResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) GetMetrics(ctx context.Context, _ *api.GetMetricsRequest) (*api.GetMetricsResponse, error) {
	return &api.GetMetricsResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) GetProfile(ctx context.Context, _ *api.GetProfileRequest) (*api.GetProfileResponse, error) {
	return &api.GetProfileResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) Recover(srv grpc.ClientStreamingServer[api.RecoverRequest, api.RecoverResponse]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	if _, err := srv.Recv(); err != nil {
		return err
	}
	return srv.SendAndClose(&api.RecoverResponse{})
}

func (testNodeManagement) Update(_ *api.UpdateRequest, srv grpc.ServerStreamingServer[api.UpdateProgress]) error {
	if err := streamPeer(srv); err != nil {
		return err
	}
	return srv.Send(&api.UpdateProgress{})
}

func (testNodeManagement) GetSystemSlots(ctx context.Context, _ *api.GetSystemSlotsRequest) (*api.GetSystemSlotsResponse, error) {
	return &api.GetSystemSlotsResponse{}, unaryPeer(ctx)
}

func (testNodeManagement) Rollback(ctx context.Context, _ *api.RollbackRequest) (*api.RollbackResponse, error) {
	return &api.RollbackResponse{}, unaryPeer(ctx)
}

// registerTestServices registers every Cairn service on s.
func registerTestServices(s *Server) {
	api.RegisterAAAServer(s, testAAA{})
	api.RegisterManagementServer(s, testManagement{})
	api.RegisterCuratorServer(s, testCurator{})
	api.RegisterNodeManagementServer(s, testNodeManagement{})
}
