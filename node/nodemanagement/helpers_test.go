package nodemanagement

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/proto/api"
)

func TestMain(m *testing.M) {
	if os.Getenv(burnEnv) != "" {
		// A child of TestReadResources.
		burnCPU()
		os.Exit(0)
	}
	// Recover's tests run a real etcd member.
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// ownerCredentials makes an owner of ca and returns client credentials
// with its key and certificate.
func ownerCredentials(t testing.TB, ca *identitytest.CA) credentials.TransportCredentials {
	t.Helper()
	key, der := ca.Owner(t)
	creds, err := rpc.OwnerCredentials(key, der, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	return creds
}

// testServer is svc served by a node over real TLS on loopback, with the
// CA that issued the node's certificate, for the length of a test.
type testServer struct {
	ca   *identitytest.CA
	addr string
}

func serve(t *testing.T, svc *Service) *testServer {
	t.Helper()
	ca := identitytest.NewCA(t, "test cluster CA")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	srv := rpc.NewServer(ca.Node(t))
	api.RegisterNodeManagementServer(srv, svc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{ca: ca, addr: lis.Addr().String()}
}

// client dials the server with creds until the test ends.
func (s *testServer) client(t *testing.T, creds credentials.TransportCredentials) api.NodeManagementClient {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("NewClient(%q): %v", s.addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewNodeManagementClient(conn)
}

// owner dials the server as the cluster owner.
func (s *testServer) owner(t *testing.T) api.NodeManagementClient {
	t.Helper()
	return s.client(t, ownerCredentials(t, s.ca))
}

// fakeStream is the server side of a Logs stream for calling the handler
// directly. Send records each message; while blocked is open, Send waits.
type fakeStream struct {
	grpc.ServerStream // nil: calling what is not overridden panics

	ctx     context.Context
	blocked chan struct{}
	// headers is closed by SendHeader, which Logs calls once its reader
	// is in place.
	headers chan struct{}

	mu   sync.Mutex
	msgs []*api.LogsResponse
	// sent is signalled, without blocking, after each Send.
	sent chan struct{}
}

func newFakeStream(ctx context.Context) *fakeStream {
	return &fakeStream{ctx: ctx, sent: make(chan struct{}, 1), headers: make(chan struct{})}
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) SendHeader(metadata.MD) error {
	close(f.headers)
	return nil
}

func (f *fakeStream) Send(m *api.LogsResponse) error {
	if f.blocked != nil {
		select {
		case <-f.blocked:
		case <-f.ctx.Done():
			return f.ctx.Err()
		}
	}
	f.mu.Lock()
	f.msgs = append(f.msgs, m)
	f.mu.Unlock()
	select {
	case f.sent <- struct{}{}:
	default:
	}
	return nil
}

// messages returns what was sent so far.
func (f *fakeStream) messages() []*api.LogsResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*api.LogsResponse(nil), f.msgs...)
}

// entries returns every entry sent so far, in order.
func (f *fakeStream) entries() []*api.LogEntry {
	var out []*api.LogEntry
	for _, m := range f.messages() {
		out = append(out, m.GetEntries()...)
	}
	return out
}
