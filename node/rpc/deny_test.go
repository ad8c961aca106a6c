package rpc

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// unmarkedFile is a proto file of a service whose method declares no
// authz option, registered in the global registry as generated code would
// register it.
var unmarkedFile = &descriptorpb.FileDescriptorProto{
	Name:        proto.String("node/rpc/unmarked_test.proto"),
	Package:     proto.String("cairn.rpctest"),
	Syntax:      proto.String("proto3"),
	MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Nothing")}},
	Service: []*descriptorpb.ServiceDescriptorProto{{
		Name: proto.String("Unmarked"),
		Method: []*descriptorpb.MethodDescriptorProto{{
			Name:       proto.String("Call"),
			InputType:  proto.String(".cairn.rpctest.Nothing"),
			OutputType: proto.String(".cairn.rpctest.Nothing"),
		}},
	}},
}

func init() {
	fd, err := protodesc.NewFile(unmarkedFile, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(err)
	}
}

// succeed is the unary handler of method, which always succeeds. Like a
// generated handler, it runs the interceptor with the method's name.
func succeed(method string) grpc.MethodHandler {
	return func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := &emptypb.Empty{}
		if err := dec(in); err != nil {
			return nil, err
		}
		info := &grpc.UnaryServerInfo{FullMethod: method}
		h := func(context.Context, any) (any, error) { return &emptypb.Empty{}, nil }
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, info, h)
	}
}

// TestDefaultDeny shows that a method is refused to everyone, the owner
// included, when it declares no authorization or the registry does not
// know it at all, however willing its handler.
func TestDefaultDeny(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	services := []*grpc.ServiceDesc{
		// Known to the registry, without the option.
		{ServiceName: "cairn.rpctest.Unmarked", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: succeed("/cairn.rpctest.Unmarked/Call")}}},
		// Unknown to the registry.
		{ServiceName: "cairn.rpctest.Ghost", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: succeed("/cairn.rpctest.Ghost/Call")}}},
	}
	var server *Server
	addr := startServer(t, ca.Node(t), func(s *Server) {
		server = s
		for _, sd := range services {
			s.RegisterService(sd, struct{}{})
		}
	})
	if got := len(server.Methods()); got != 2 {
		t.Errorf("server.Methods() has %d methods, want the 2 registered", got)
	}
	ownerKey, ownerDER := ca.Owner(t)
	owner, err := OwnerCredentials(ownerKey, ownerDER, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	anonymous, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
	}{
		{"owner", dial(t, addr, owner)},
		{"node", dial(t, addr, NodeCredentials(ca.Node(t)))},
		{"no certificate", dial(t, addr, anonymous)},
	} {
		for _, name := range []string{"/cairn.rpctest.Unmarked/Call", "/cairn.rpctest.Ghost/Call"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.conn.Invoke(ctx, name, &emptypb.Empty{}, &emptypb.Empty{})
			cancel()
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "declares no authorization") {
				t.Errorf("%s calling %s = %v, want PermissionDenied for a missing authorization", c.name, name, err)
			}
		}
	}
}

// TestLookupMethod reads options of real methods and refuses names that
// are not methods.
func TestLookupMethod(t *testing.T) {
	m, err := LookupMethod("/cairn.api.Curator/Watch")
	if err != nil {
		t.Fatalf("LookupMethod(Watch): %v", err)
	}
	if !m.ServerStream || m.ClientStream {
		t.Errorf("LookupMethod(Watch) = %+v, want a server stream", m)
	}
	for _, name := range []string{"", "/", "cairn.api.Curator/Watch", "/cairn.api.Curator/", "/cairn.api.Curator/Nope", "/cairn.api.Node/id"} {
		if m, err := LookupMethod(name); err == nil {
			t.Errorf("LookupMethod(%q) = %+v, want an error", name, m)
		}
	}
}

// TestForeignCertificateRefusedAtHandshake shows where the matrix's
// foreign caller is stopped: the server's TLS handshake refuses its
// certificate, before gRPC runs.
func TestForeignCertificateRefusedAtHandshake(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	addr := startServer(t, ca.Node(t), registerTestServices)
	c, err := identity.EphemeralClientTLSConfig(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralClientTLSConfig: %v", err)
	}
	c.Certificates = []tls.Certificate{identitytest.NewCA(t, "foreign CA").Node(t).TLSCertificate()}
	c.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		t.Fatalf("tls.Dial: %v", err)
	}
	defer conn.Close()
	// In TLS 1.3 the client finishes first; the server's verdict on the
	// client certificate arrives as an alert on the first read.
	if _, err := conn.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("reading after a handshake with a foreign certificate: %v, want a certificate alert", err)
	}
}
