package rpc

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc/rpctest"
	"cairn.dev/cairn/proto/api"
)

// startServer serves the services register puts on a Server of node, on
// a loopback port, until the test ends. It returns the address.
func startServer(t *testing.T, node *identity.Node, register func(*Server)) string {
	t.Helper()
	return serve(t, NewServer(node), register)
}

// serve is startServer for the server s.
func serve(t *testing.T, s *Server, register func(*Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	register(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// dial connects to addr with creds until the test ends.
var dial = rpctest.Dial

// call calls m over conn with empty messages, which every request and
// response type of an empty-handed test decodes, and returns the peer the
// handler announced.
func call(ctx context.Context, conn *grpc.ClientConn, m Method) (string, error) {
	var header metadata.MD
	if !m.ClientStream && !m.ServerStream {
		err := conn.Invoke(ctx, m.Name, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Header(&header))
		return strings.Join(header.Get(peerHeader), ","), err
	}
	desc := &grpc.StreamDesc{ClientStreams: m.ClientStream, ServerStreams: m.ServerStream}
	stream, err := conn.NewStream(ctx, desc, m.Name)
	if err != nil {
		return "", err
	}
	// A refused stream may already be closed when the request goes out;
	// SendMsg then fails with io.EOF and RecvMsg below brings the verdict.
	if err := stream.SendMsg(&emptypb.Empty{}); err != nil && err != io.EOF {
		return "", err
	}
	if err := stream.CloseSend(); err != nil {
		return "", err
	}
	if err := stream.RecvMsg(&emptypb.Empty{}); err != nil {
		return "", err
	}
	header, err = stream.Header()
	return strings.Join(header.Get(peerHeader), ","), err
}

// caller is one kind of client of the matrix.
type caller struct {
	name  string
	creds credentials.TransportCredentials
	// want is the outcome for a method of each class, and peer what the
	// handler is expected to announce when the call succeeds.
	want map[api.Authorization]codes.Code
	peer string
}

// outcomes makes a caller's expectations: ok for the listed classes,
// refused with the given code for the others.
func outcomes(refused codes.Code, ok ...api.Authorization) map[api.Authorization]codes.Code {
	want := map[api.Authorization]codes.Code{
		api.Authorization_AUTHORIZATION_OWNER:                       refused,
		api.Authorization_AUTHORIZATION_NODE:                        refused,
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_WITH_TICKET: refused,
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_PROOF:       refused,
	}
	for _, a := range ok {
		want[a] = codes.OK
	}
	return want
}

// TestAuthorizationMatrix calls every RPC of ListMethods with every kind of
// caller, over real TLS on loopback, against handlers that always succeed:
// what fails is refused by the authorization layer alone.
func TestAuthorizationMatrix(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	foreign := identitytest.NewCA(t, "foreign CA")
	server := ca.Node(t)
	addr := startServer(t, server, registerTestServices)

	client := ca.Node(t)
	ownerKey, ownerDER := ca.Owner(t)
	owner, err := OwnerCredentials(ownerKey, ownerDER, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	anonymous, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials(nil): %v", err)
	}
	selfSigned, err := EphemeralCredentials(ca.DER(), identitytest.NewKey(t))
	if err != nil {
		t.Fatalf("EphemeralCredentials(key): %v", err)
	}
	foreignNode := foreign.Node(t)
	foreignCreds := foreignClientCredentials(t, ca, foreignNode.TLSCertificate())
	metricsKey := identitytest.NewKey(t)
	metricsTLS, err := identity.MetricsClientTLSConfig(metricsKey, ca.Issue(t, identity.MetricsCertificateTemplate("prometheus"), metricsKey.Public().(ed25519.PublicKey)), ca.DER())
	if err != nil {
		t.Fatalf("MetricsClientTLSConfig: %v", err)
	}

	unauth := []api.Authorization{
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_WITH_TICKET,
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_PROOF,
	}
	callers := []caller{
		{name: "no certificate", creds: anonymous, want: outcomes(codes.Unauthenticated, unauth...), peer: "anonymous "},
		// The handshake refuses a foreign certificate before any method is
		// looked at, so every call fails to connect.
		{name: "foreign CA", creds: foreignCreds, want: outcomes(codes.Unavailable)},
		{name: "self-signed", creds: selfSigned, want: outcomes(codes.Unauthenticated, unauth...), peer: "self-signed "},
		{name: "node", creds: NodeCredentials(client), want: outcomes(codes.PermissionDenied, append(unauth, api.Authorization_AUTHORIZATION_NODE)...), peer: "node " + client.ID()},
		{name: "owner", creds: owner, want: outcomes(codes.PermissionDenied, append(unauth, api.Authorization_AUTHORIZATION_OWNER)...), peer: "owner "},
		// A scraper's certificate of the cluster CA reads metrics on
		// their own port, and calls nothing.
		{name: "metrics", creds: credentials.NewTLS(metricsTLS), want: outcomes(codes.PermissionDenied, unauth...), peer: "metrics "},
	}
	methods := ListMethods()
	if len(methods) == 0 {
		t.Fatal("ListMethods() is empty")
	}
	for _, c := range callers {
		conn := dial(t, addr, c.creds)
		t.Run(c.name, func(t *testing.T) {
			for _, m := range methods {
				want, ok := c.want[m.Authz]
				if !ok {
					t.Errorf("%s declares %s, which the matrix has no expectation for", m.Name, m.Authz)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				peer, err := call(ctx, conn, m)
				cancel()
				if got := status.Code(err); got != want {
					t.Errorf("%s (%s) = %v, want %v", m.Name, m.Authz, err, want)
					continue
				}
				if want == codes.OK && peer != c.peer {
					t.Errorf("%s: handler saw peer %q, want %q", m.Name, peer, c.peer)
				}
				if want == codes.Unauthenticated || want == codes.PermissionDenied {
					if msg := status.Convert(err).Message(); !strings.Contains(msg, m.Name) {
						t.Errorf("%s: error %q does not name the method", m.Name, msg)
					}
				}
			}
		})
	}
}

// foreignClientCredentials present cert, which the cluster CA did not
// issue, to a server they verify against the cluster CA as every client
// does.
func foreignClientCredentials(t *testing.T, ca *identitytest.CA, cert tls.Certificate) credentials.TransportCredentials {
	t.Helper()
	c, err := identity.EphemeralClientTLSConfig(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralClientTLSConfig: %v", err)
	}
	c.Certificates = []tls.Certificate{cert}
	return credentials.NewTLS(c)
}

// TestListMethods checks that the table holds every method of the four
// services, each with a class.
func TestListMethods(t *testing.T) {
	want := map[string]api.Authorization{}
	for _, sd := range []*grpc.ServiceDesc{&api.AAA_ServiceDesc, &api.Management_ServiceDesc, &api.Curator_ServiceDesc, &api.NodeManagement_ServiceDesc} {
		for _, m := range sd.Methods {
			want["/"+sd.ServiceName+"/"+m.MethodName] = 0
		}
		for _, st := range sd.Streams {
			want["/"+sd.ServiceName+"/"+st.StreamName] = 0
		}
	}
	got := map[string]api.Authorization{}
	for _, m := range ListMethods() {
		got[m.Name] = m.Authz
		if m.Authz == api.Authorization_AUTHORIZATION_UNSPECIFIED {
			t.Errorf("%s declares no authorization", m.Name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("ListMethods() lacks %s", name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("ListMethods() has %d methods, the services %d", len(got), len(want))
	}
	for _, tc := range []struct {
		name string
		want api.Authorization
	}{
		{"/cairn.api.AAA/Escrow", api.Authorization_AUTHORIZATION_UNAUTHENTICATED_PROOF},
		{"/cairn.api.Curator/RegisterNode", api.Authorization_AUTHORIZATION_UNAUTHENTICATED_WITH_TICKET},
		{"/cairn.api.Curator/Watch", api.Authorization_AUTHORIZATION_NODE},
		{"/cairn.api.Management/GetNodes", api.Authorization_AUTHORIZATION_OWNER},
		{"/cairn.api.NodeManagement/Logs", api.Authorization_AUTHORIZATION_OWNER},
	} {
		if got[tc.name] != tc.want {
			t.Errorf("ListMethods()[%q] = %s, want %s", tc.name, got[tc.name], tc.want)
		}
	}
}
