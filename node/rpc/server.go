package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/proto/api"
)

// Server is a gRPC server of a node: it speaks TLS with the node's identity
// and admits each call only when the caller fits the class the called
// method declares. Register services on it as on a grpc.Server, then
// Serve.
type Server struct {
	node *identity.Node
	grpc *grpc.Server
	// table holds every registered method by gRPC name. RegisterService
	// writes it, before Serve starts; interceptors only read it.
	table map[string]Method
	// trust decides which nodes may forward calls for others; nil refuses
	// every forwarded call. Set before Serve, only read after.
	trust ForwarderTrust
	// owners is the cluster's owner trust, by which owner callers are
	// judged (owner.go); nil admits every owner certificate. Set before
	// Serve, only read after.
	owners event.Watchable[*api.OwnerTrust]
	// ownerWait is how long an owner call waits for owners to name an
	// owner key: ownerTrustWait, shorter in tests.
	ownerWait time.Duration
}

// NewServer returns a server for node, with the limits of limits.go on
// every connection and call. opts are passed on to gRPC after the
// credentials, interceptors, tap handle and limits, which they must not
// replace.
func NewServer(node *identity.Node, opts ...grpc.ServerOption) *Server {
	return newServer(node, defaultLimits, opts...)
}

// serverMetrics counts the calls every Server of the process serves, by
// service, method and code, as cairn_grpc_server_*: etcd's own gRPC server
// already has the plain grpc_server_* names in the process.
var serverMetrics = grpcprom.NewServerMetrics(grpcprom.WithServerCounterOptions(grpcprom.WithSubsystem("cairn")))

// Metrics is the collector of the calls this process's Servers served,
// for the node's metrics (node/metrics).
func Metrics() prometheus.Collector { return serverMetrics }

// newServer is NewServer with the limits l.
func newServer(node *identity.Node, l serverLimits, opts ...grpc.ServerOption) *Server {
	s := &Server{node: node, table: make(map[string]Method), ownerWait: ownerTrustWait}
	all := append([]grpc.ServerOption{
		grpc.Creds(ServerCredentials(node)),
		// Counted first, so that refused calls count too.
		grpc.ChainUnaryInterceptor(serverMetrics.UnaryServerInterceptor(), s.unaryInterceptor),
		grpc.ChainStreamInterceptor(serverMetrics.StreamServerInterceptor(), s.streamInterceptor),
		grpc.InTapHandle(tapCall),
	}, l.options()...)
	s.grpc = grpc.NewServer(append(all, opts...)...)
	return s
}

// RegisterService registers a service implementation, as generated
// Register*Server functions call it, and looks up the authorization class
// of each of its methods in the protobuf registry. A method the registry
// does not know, or that declares no class, is registered all the same and
// refused on every call. Like gRPC's, it must be called before Serve.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	names := make([]string, 0, len(sd.Methods)+len(sd.Streams))
	for _, m := range sd.Methods {
		names = append(names, fmt.Sprintf("/%s/%s", sd.ServiceName, m.MethodName))
	}
	for _, st := range sd.Streams {
		names = append(names, fmt.Sprintf("/%s/%s", sd.ServiceName, st.StreamName))
	}
	for _, name := range names {
		m, err := LookupMethod(name)
		if err != nil {
			m = Method{Name: name, Authz: api.Authorization_AUTHORIZATION_UNSPECIFIED}
		}
		s.table[name] = m
	}
	s.grpc.RegisterService(sd, impl)
}

// Methods returns the registered methods with their classes, in no
// particular order.
func (s *Server) Methods() []Method {
	methods := make([]Method, 0, len(s.table))
	for _, m := range s.table {
		methods = append(methods, m)
	}
	return methods
}

// Serve accepts connections on lis until ctx is done, then stops the
// server, closing every connection and cancelling every call in flight, and
// returns nil. It returns gRPC's error when serving fails before that.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	stop := context.AfterFunc(ctx, s.grpc.Stop)
	defer stop()
	err := s.grpc.Serve(lis)
	if ctx.Err() != nil && (err == nil || errors.Is(err, grpc.ErrServerStopped)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("when serving gRPC on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Stop closes every connection and cancels every call in flight.
func (s *Server) Stop() { s.grpc.Stop() }

// ServerCredentials are the TLS credentials of every gRPC server of node:
// they present the node certificate and admit clients of every kind
// node/identity knows, leaving the choice between them to the interceptors.
func ServerCredentials(node *identity.Node) credentials.TransportCredentials {
	return credentials.NewTLS(node.ServerTLSConfig())
}
