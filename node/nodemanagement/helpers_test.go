package nodemanagement

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testCA is a cluster CA minted with crypto/x509 alone, issuing certificates
// of node/identity's profiles.
type testCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key := newKey(t)
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test cluster CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		t.Fatalf("creating CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing CA certificate: %v", err)
	}
	return &testCA{key: key, cert: cert}
}

// issue signs template for pub, valid from an hour ago for a day.
func (ca *testCA) issue(t testing.TB, template x509.Certificate, pub ed25519.PublicKey) []byte {
	t.Helper()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatalf("choosing serial: %v", err)
	}
	template.SerialNumber = serial
	template.NotBefore = time.Now().Add(-time.Hour)
	template.NotAfter = time.Now().Add(24 * time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &template, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatalf("issuing certificate: %v", err)
	}
	return der
}

// node makes a node identity with a fresh key.
func (ca *testCA) node(t testing.TB) *identity.Node {
	t.Helper()
	key := newKey(t)
	pub := key.Public().(ed25519.PublicKey)
	n, err := identity.NewNode(key, ca.issue(t, identity.NodeCertificateTemplate(pub), pub), ca.cert.Raw)
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

// ownerCredentials makes an owner key and certificate and returns client
// credentials with them.
func (ca *testCA) ownerCredentials(t testing.TB) credentials.TransportCredentials {
	t.Helper()
	key := newKey(t)
	der := ca.issue(t, identity.OwnerCertificateTemplate(), key.Public().(ed25519.PublicKey))
	creds, err := rpc.OwnerCredentials(key, der, ca.cert.Raw)
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	return creds
}

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}

// testServer is svc served by a node over real TLS on loopback, with the
// CA that issued the node's certificate, for the length of a test.
type testServer struct {
	ca   *testCA
	addr string
}

func serve(t *testing.T, svc *Service) *testServer {
	t.Helper()
	ca := newTestCA(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	srv := rpc.NewServer(ca.node(t))
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
	return s.client(t, s.ca.ownerCredentials(t))
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
