package rpc

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/proto/api"
)

// The tests below each shrink one limit of a real server on loopback, or
// use it as it is where it is cheap to reach, and do what the limit is
// there to stop. Where no gRPC client would misbehave that way, they
// speak HTTP/2 by hand.

// limitedServer serves the test services on a Server of a fresh cluster
// with the limits change makes of defaultLimits. It returns the address
// and the CA.
func limitedServer(t *testing.T, change func(*serverLimits), register func(*Server)) (string, *identitytest.CA) {
	t.Helper()
	ca := identitytest.NewCA(t, "cluster CA")
	l := defaultLimits
	if change != nil {
		change(&l)
	}
	return serve(t, newServer(ca.Node(t), l), register), ca
}

// rawHTTP2 opens a TLS connection to addr as a client without a
// certificate, sends the HTTP/2 preface and settings, and returns a framer
// on it.
func rawHTTP2(t *testing.T, addr string, ca *identitytest.CA) (*http2.Framer, net.Conn) {
	t.Helper()
	creds, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dialling %s: %v", addr, err)
	}
	t.Cleanup(func() { raw.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := creds.ClientHandshake(ctx, addr, raw)
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("writing the HTTP/2 preface: %v", err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatalf("writing SETTINGS: %v", err)
	}
	return fr, conn
}

// errNoFrame is what readFrame returns when no wanted frame came in time.
var errNoFrame = errors.New("no such frame came in time")

// readFrame reads frames from fr until one for which want is true, and
// returns it. It acknowledges the server's settings on the way, but not
// its pings. It returns the read error when the connection ends, and
// errNoFrame after d.
func readFrame(fr *http2.Framer, conn net.Conn, d time.Duration, want func(http2.Frame) bool) (http2.Frame, error) {
	conn.SetReadDeadline(time.Now().Add(d))
	defer conn.SetReadDeadline(time.Time{})
	for {
		f, err := fr.ReadFrame()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, errNoFrame
		}
		if err != nil {
			return nil, err
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			if err := fr.WriteSettingsAck(); err != nil {
				return nil, err
			}
		}
		if want(f) {
			return f, nil
		}
	}
}

func isGoAway(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }

func isPingAck(f http2.Frame) bool {
	p, ok := f.(*http2.PingFrame)
	return ok && p.IsAck()
}

func isServerPing(f http2.Frame) bool {
	p, ok := f.(*http2.PingFrame)
	return ok && !p.IsAck()
}

// TestHandshakeTimeout connects and says nothing: the server hangs up
// after the handshake timeout instead of holding the connection.
func TestHandshakeTimeout(t *testing.T) {
	addr, _ := limitedServer(t, func(l *serverLimits) { l.handshakeTimeout = 200 * time.Millisecond }, registerTestServices)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dialling: %v", err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("reading from a connection that sent nothing = %v, want the server to close it", err)
	}
	t.Logf("server closed a silent connection after %v", time.Since(start))
}

// TestMaxConnectionIdle opens a connection and makes no call: the server
// sends GOAWAY once it has been idle for MaxConnectionIdle.
func TestMaxConnectionIdle(t *testing.T) {
	addr, ca := limitedServer(t, func(l *serverLimits) { l.keepalive.MaxConnectionIdle = 200 * time.Millisecond }, registerTestServices)
	fr, conn := rawHTTP2(t, addr, ca)
	if _, err := readFrame(fr, conn, 10*time.Second, isGoAway); err != nil {
		t.Fatalf("waiting for GOAWAY on an idle connection: %v", err)
	}
}

// TestKeepalivePing stays silent on a connection and answers no ping:
// the server pings after Time and closes the connection Timeout later.
func TestKeepalivePing(t *testing.T) {
	addr, ca := limitedServer(t, func(l *serverLimits) {
		l.keepalive.Time = time.Second // gRPC's shortest
		l.keepalive.Timeout = 200 * time.Millisecond
	}, registerTestServices)
	fr, conn := rawHTTP2(t, addr, ca)
	if _, err := readFrame(fr, conn, 10*time.Second, isServerPing); err != nil {
		t.Fatalf("waiting for the server's keepalive ping: %v", err)
	}
	f, err := readFrame(fr, conn, 10*time.Second, func(http2.Frame) bool { return false })
	if errors.Is(err, errNoFrame) {
		t.Fatal("the server kept a connection that does not answer its ping")
	}
	t.Logf("after an unanswered ping: %v, %v", f, err)
}

// TestKeepaliveEnforcement pings without any call in flight: at the
// interval the policy permits, the server answers every ping; faster, it
// hangs up with ENHANCE_YOUR_CALM.
func TestKeepaliveEnforcement(t *testing.T) {
	addr, ca := limitedServer(t, func(l *serverLimits) { l.enforcement.MinTime = 100 * time.Millisecond }, registerTestServices)
	ping := func(fr *http2.Framer, conn net.Conn, i int) (http2.Frame, error) {
		if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			return nil, err
		}
		return readFrame(fr, conn, 10*time.Second, func(f http2.Frame) bool { return isPingAck(f) || isGoAway(f) })
	}

	fr, conn := rawHTTP2(t, addr, ca)
	for i := range 5 {
		time.Sleep(300 * time.Millisecond)
		f, err := ping(fr, conn, i)
		if err != nil || !isPingAck(f) {
			t.Fatalf("ping %d, %v apart without a call: %v, %v, want an ack", i, 300*time.Millisecond, f, err)
		}
	}

	fr, conn = rawHTTP2(t, addr, ca)
	for i := range 5 {
		f, err := ping(fr, conn, i)
		if err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY for too many pings has code %v, want %v", g.ErrCode, http2.ErrCodeEnhanceYourCalm)
			}
			return
		}
	}
	t.Error("the server answered 5 pings in a row, want GOAWAY")
}

// blockingCurator holds every Watch open until the client ends it, after
// sending its headers, so that the client knows the stream started.
type blockingCurator struct{ testCurator }

func (blockingCurator) Watch(_ *api.WatchRequest, srv grpc.ServerStreamingServer[api.WatchEvent]) error {
	if err := srv.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	<-srv.Context().Done()
	return nil
}

// TestMaxConcurrentStreams holds streams open on one connection up to
// the limit: the next one does not start until one of them ends.
func TestMaxConcurrentStreams(t *testing.T) {
	const max = 2
	ca := identitytest.NewCA(t, "cluster CA")
	l := defaultLimits
	l.maxConcurrentStreams = max
	addr := serve(t, newServer(ca.Node(t), l), func(s *Server) { api.RegisterCuratorServer(s, blockingCurator{}) })
	conn := dial(t, addr, NodeCredentials(ca.Node(t)))

	// open starts a Watch and waits up to d for its headers.
	open := func(d time.Duration) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		timer := time.AfterFunc(d, cancel)
		defer timer.Stop()
		stream, err := api.NewCuratorClient(conn).Watch(ctx, &api.WatchRequest{})
		if err != nil {
			return cancel, err
		}
		_, err = stream.Header()
		return cancel, err
	}
	var first context.CancelFunc
	for i := range max {
		cancel, err := open(10 * time.Second)
		if err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, max, err)
		}
		if first == nil {
			first = cancel
		}
	}
	if _, err := open(500 * time.Millisecond); status.Code(err) != codes.Canceled {
		t.Fatalf("stream %d while %d are open = %v, want it to wait (and be cancelled)", max+1, max, err)
	}
	first()
	if _, err := open(10 * time.Second); err != nil {
		t.Fatalf("stream after one of %d ended: %v", max, err)
	}
}

// TestMaxRecvMsgSize sends a request just over the limit, which the server
// refuses before any handler sees it, and one well under it.
func TestMaxRecvMsgSize(t *testing.T) {
	addr, ca := limitedServer(t, nil, registerTestServices)
	creds, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	cur := api.NewCuratorClient(dial(t, addr, creds))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		size int
		want codes.Code
	}{
		{maxRecvMsgSize / 2, codes.OK},
		{maxRecvMsgSize, codes.ResourceExhausted},
	} {
		_, err := cur.RegisterNode(ctx, &api.RegisterNodeRequest{JoinKey: make([]byte, tc.size)})
		if status.Code(err) != tc.want {
			t.Errorf("RegisterNode with a %d-byte join key = %v, want %v", tc.size, err, tc.want)
		}
	}
}

// bigLogs answers Logs with one message of half the send limit, then one
// over it.
type bigLogs struct{ testNodeManagement }

func (bigLogs) Logs(_ *api.LogsRequest, srv grpc.ServerStreamingServer[api.LogsResponse]) error {
	for _, size := range []int{maxSendMsgSize / 2, maxSendMsgSize} {
		entry := &api.LogEntry{Message: strings.Repeat("x", size)}
		if err := srv.Send(&api.LogsResponse{Entries: []*api.LogEntry{entry}}); err != nil {
			return err
		}
	}
	return nil
}

// TestMaxSendMsgSize has a handler send a response under the limit and
// one over it, to a client that would take both: the second fails on the
// server's side.
func TestMaxSendMsgSize(t *testing.T) {
	addr, ca := limitedServer(t, nil, func(s *Server) { api.RegisterNodeManagementServer(s, bigLogs{}) })
	key, der := ca.Owner(t)
	owner, err := OwnerCredentials(key, der, ca.DER())
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(owner), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(4*maxSendMsgSize)))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := api.NewNodeManagementClient(conn).Logs(ctx, &api.LogsRequest{})
	if err != nil {
		t.Fatalf("Logs: %v", err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first response, half the limit: %v", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second response, over the limit = %v, want ResourceExhausted", err)
	}
}

// expiringAAA runs Escrow under Expire: it waits for a hello for at most
// hello, then returns OK.
type expiringAAA struct {
	api.UnimplementedAAAServer
	hello time.Duration
}

func (e expiringAAA) Escrow(srv grpc.BidiStreamingServer[api.EscrowFromClient, api.EscrowFromServer]) error {
	stop := Expire(srv.Context(), e.hello, "no hello came")
	defer stop()
	_, err := srv.Recv()
	return err
}

// slowCurator answers RegisterNode when its context ends, which Expire
// makes it do after a while.
type slowCurator struct{ testCurator }

func (slowCurator) RegisterNode(ctx context.Context, _ *api.RegisterNodeRequest) (*api.RegisterNodeResponse, error) {
	defer Expire(ctx, 100*time.Millisecond, "the handler took too long")()
	<-ctx.Done()
	return nil, fmt.Errorf("when waiting: %w", ctx.Err())
}

// TestExpire opens a stream and sends nothing: the server ends it with
// DeadlineExceeded, while the client has no deadline at all. A client
// that sends in time is served. A handler that returns an error after
// Expire ended its call says why.
func TestExpire(t *testing.T) {
	addr, ca := limitedServer(t, nil, func(s *Server) {
		api.RegisterAAAServer(s, expiringAAA{hello: 300 * time.Millisecond})
		api.RegisterCuratorServer(s, slowCurator{})
	})
	creds, err := EphemeralCredentials(ca.DER(), nil)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	aaa := api.NewAAAClient(dial(t, addr, creds))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Should the server not end it, the test does, and the code says so.
	defer time.AfterFunc(30*time.Second, cancel).Stop()

	stream, err := aaa.Escrow(ctx)
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	start := time.Now()
	_, err = stream.Recv()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Escrow without a hello = %v, want DeadlineExceeded", err)
	}
	t.Logf("the server ended a silent stream after %v", time.Since(start))

	stream, err = aaa.Escrow(ctx)
	if err != nil {
		t.Fatalf("Escrow: %v", err)
	}
	hello := &api.EscrowFromClient_Hello{OwnerPublicKey: make(ed25519.PublicKey, ed25519.PublicKeySize)}
	if err := stream.Send(&api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: hello}}); err != nil {
		t.Fatalf("sending the hello: %v", err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("Escrow with a hello in time = %v, want the stream to end normally", err)
	}

	_, err = api.NewCuratorClient(dial(t, addr, creds)).RegisterNode(ctx, &api.RegisterNodeRequest{})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "the handler took too long") {
		t.Errorf("a call that Expire ended = %v, want DeadlineExceeded saying the handler took too long", err)
	}
}

// addressCurator answers RegisterNode with the caller's address, as
// CallerAddress gives it, in a response header.
type addressCurator struct{ testCurator }

const addressHeader = "test-address"

func (addressCurator) RegisterNode(ctx context.Context, _ *api.RegisterNodeRequest) (*api.RegisterNodeResponse, error) {
	addr, ok := CallerAddress(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no caller address")
	}
	return &api.RegisterNodeResponse{}, grpc.SetHeader(ctx, metadata.Pairs(addressHeader, addr.String()))
}

// TestForwardedAddress checks which address CallerAddress gives a handler:
// the connection's, or the one a trusted forwarder names.
func TestForwardedAddress(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	forwarder := ca.Node(t)
	addr := serve(t, NewServer(ca.Node(t)), func(s *Server) {
		api.RegisterCuratorServer(s, addressCurator{})
		s.TrustForwarders(func(_ context.Context, p, _ identity.Peer) error {
			if p.NodeID != forwarder.ID() {
				return errors.New("not the forwarder")
			}
			return nil
		})
	})
	selfSigned, err := EphemeralCredentials(ca.DER(), identitytest.NewKey(t))
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	direct := api.NewCuratorClient(dial(t, addr, selfSigned))
	forwarded := api.NewCuratorClient(dial(t, addr, NodeCredentials(forwarder)))
	caller := identity.Peer{Kind: identity.PeerSelfSigned, PublicKey: identitytest.NewKey(t).Public().(ed25519.PublicKey)}
	// The context of a call the forwarder received from 192.0.2.7.
	received := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4242}})

	for _, tc := range []struct {
		name string
		cur  api.CuratorClient
		ctx  context.Context
		want string
		code codes.Code
	}{
		{"direct", direct, context.Background(), "127.0.0.1", codes.OK},
		{"direct, claiming an address", direct, metadata.AppendToOutgoingContext(context.Background(), ForwardedAddressHeader, "192.0.2.9"), "127.0.0.1", codes.OK},
		{"forwarded", forwarded, WithForwardedPeer(received, caller), "192.0.2.7", codes.OK},
		{"forwarded without an address", forwarded, WithForwardedPeer(context.Background(), caller), "127.0.0.1", codes.OK},
		{"forwarded with a garbled address", forwarded, metadata.AppendToOutgoingContext(WithForwardedPeer(context.Background(), caller), ForwardedAddressHeader, "192.0.2"), "", codes.InvalidArgument},
	} {
		ctx, cancel := context.WithTimeout(tc.ctx, 10*time.Second)
		var header metadata.MD
		_, err := tc.cur.RegisterNode(ctx, &api.RegisterNodeRequest{}, grpc.Header(&header))
		cancel()
		if status.Code(err) != tc.code {
			t.Errorf("%s: RegisterNode = %v, want %v", tc.name, err, tc.code)
			continue
		}
		if got := strings.Join(header.Get(addressHeader), ","); tc.code == codes.OK && got != tc.want {
			t.Errorf("%s: handler saw the caller at %q, want %q", tc.name, got, tc.want)
		}
	}
}
