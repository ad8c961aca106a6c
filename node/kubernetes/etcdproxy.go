package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/etcdprefix"
	"cairn.dev/cairn/pkg/supervisor"
)

// EtcdProxy serves etcd's client API on a unix socket, confined to one key
// prefix: the apiserver reads and writes its keys as if they were all of
// etcd, and can reach no other. Keys go through etcd's namespace client
// (pkg/etcdprefix for watches), which adds the prefix to every key and
// range (a range over "everything" becomes a range over the prefix) and
// strips it from every answer.
//
//	apiserver ─▶ unix socket ─▶ KV, Watch (relayed) ─────── in process ─▶ etcd
//	                          ├▶ Lease (namespaced) ─┐
//	                          └▶ Maintenance.Status, ├─ etcd's socket ─▶ etcd
//	                             Cluster.MemberList ─┘
//	                             (read-only); anything else is refused
//
// KV and Watch, nearly all of the apiserver's calls, reach the local
// member's server in process (etcd's gRPC adapters, as its own v3client
// does): through a second gRPC connection, each call would be encoded,
// framed, written to a socket and decoded once more, which natively cost
// the proxy more CPU than the rest of a linearizable read (355 against
// 150 µs for one Get through the proxy, client included), and an emulated
// controller that much more. The server's quota check stays in the path.
//
// Compaction goes through. The apiserver compacts every five minutes, as
// upstream's does, and learns the compacted revision from the key it
// keeps for that, which its watch cache needs: a continue token older
// than the compaction must expire, as clients of Kubernetes expect. A
// compaction drops the history of every key, Cairn's too; Cairn's
// watchers need none, as each starts from a read and reads again when
// its revision was compacted (pkg/event/etcd, node/curator).
type EtcdProxy struct {
	etcd   *clientv3.Client
	server *etcdserver.EtcdServer
	prefix string
	socket string
}

// NewEtcdProxy returns a proxy of the etcd that etcd (a client for the
// whole key space) reaches, confined to prefix, served on socket. server
// is the same member's server in this process, which KV and Watch calls
// reach directly; nil sends them through etcd's socket too. Nothing
// happens before Run.
func NewEtcdProxy(etcd *clientv3.Client, server *etcdserver.EtcdServer, prefix, socket string) *EtcdProxy {
	return &EtcdProxy{etcd: etcd, server: server, prefix: prefix, socket: socket}
}

// Run serves until ctx ends. It is a supervisor runnable: healthy once it
// serves.
func (p *EtcdProxy) Run(ctx context.Context) error {
	if p.prefix == "" {
		return errors.New("the etcd proxy needs a prefix: without one it would confine nothing")
	}
	// A client of its own, as the namespace replaces its KV, Watcher and
	// Lease.
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   p.etcd.Endpoints(),
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return fmt.Errorf("when connecting the etcd proxy to etcd: %w", err)
	}
	defer cl.Close()
	kvUp, watchUp := cl.KV, pb.NewWatchClient(cl.ActiveConnection())
	if p.server != nil {
		kvUp = clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(p.server)), cl)
		watchUp = adapter.WatchServerToWatchClient(v3rpc.NewWatchServer(p.server))
	}
	cl.KV = namespace.NewKV(kvUp, p.prefix)
	cl.Watcher = namespace.NewWatcher(cl.Watcher, p.prefix)
	cl.Lease = namespace.NewLease(cl.Lease, p.prefix)

	kv, _ := grpcproxy.NewKvProxy(cl)
	// etcd's own watch proxy merges watchers and drops progress
	// requests, which the apiserver's watch cache needs: watches are
	// relayed stream by stream instead.
	watch, err := etcdprefix.NewWatchServer(watchUp, p.prefix)
	if err != nil {
		return err
	}
	lease, _ := grpcproxy.NewLeaseProxy(ctx, cl)
	// The apiserver's etcd client pings every 30 s; gRPC's default
	// policy (at most every 5 minutes) would answer those pings by
	// closing the connection. Allow what etcd itself allows.
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime:             5 * time.Second,
		PermitWithoutStream: true,
	}))
	pb.RegisterKVServer(srv, kv)
	pb.RegisterWatchServer(srv, watch)
	pb.RegisterLeaseServer(srv, lease)
	pb.RegisterMaintenanceServer(srv, &statusOnly{etcd: cl})
	pb.RegisterClusterServer(srv, &memberListOnly{etcd: cl})

	if err := os.MkdirAll(filepath.Dir(p.socket), 0o700); err != nil {
		return fmt.Errorf("when creating the etcd proxy's directory: %w", err)
	}
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("when removing an old etcd proxy socket: %w", err)
	}
	lis, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("when listening on %s: %w", p.socket, err)
	}
	defer os.Remove(p.socket)
	if err := os.Chmod(p.socket, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("when restricting %s: %w", p.socket, err)
	}
	stop := context.AfterFunc(ctx, srv.Stop)
	defer stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	err = srv.Serve(lis)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("the etcd proxy stopped serving: %w", err)
}

// errRefused answers what the proxy does not let through.
func errRefused(what string) error {
	return status.Errorf(codes.PermissionDenied, "the Kubernetes etcd proxy does not allow %s", what)
}

// statusOnly serves Maintenance.Status of the local member and refuses
// everything else (snapshots, hashes, defragmentation, alarms, leader
// moves).
type statusOnly struct {
	pb.UnimplementedMaintenanceServer
	etcd *clientv3.Client
}

func (s *statusOnly) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	eps := s.etcd.Endpoints()
	if len(eps) == 0 {
		return nil, status.Error(codes.Unavailable, "no etcd endpoint")
	}
	res, err := s.etcd.Status(ctx, eps[0])
	if err != nil {
		return nil, err
	}
	return (*pb.StatusResponse)(res), nil
}

func (*statusOnly) Alarm(context.Context, *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return nil, errRefused("alarms")
}

func (*statusOnly) Defragment(context.Context, *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return nil, errRefused("defragmentation")
}

func (*statusOnly) Hash(context.Context, *pb.HashRequest) (*pb.HashResponse, error) {
	return nil, errRefused("hashes of the whole store")
}

func (*statusOnly) HashKV(context.Context, *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return nil, errRefused("hashes of the whole store")
}

func (*statusOnly) Snapshot(*pb.SnapshotRequest, pb.Maintenance_SnapshotServer) error {
	return errRefused("snapshots: they hold every key")
}

func (*statusOnly) MoveLeader(context.Context, *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return nil, errRefused("moving the leader")
}

func (*statusOnly) Downgrade(context.Context, *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, errRefused("downgrades")
}

// memberListOnly serves Cluster.MemberList and refuses membership changes.
type memberListOnly struct {
	pb.UnimplementedClusterServer
	etcd *clientv3.Client
}

func (m *memberListOnly) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	var opts []clientv3.OpOption
	if !r.Linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	res, err := m.etcd.MemberList(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return (*pb.MemberListResponse)(res), nil
}

func (*memberListOnly) MemberAdd(context.Context, *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, errRefused("membership changes")
}

func (*memberListOnly) MemberRemove(context.Context, *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return nil, errRefused("membership changes")
}

func (*memberListOnly) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, errRefused("membership changes")
}

func (*memberListOnly) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, errRefused("membership changes")
}
