package curator

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcinsecure "google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
)

// TestRouting checks where the interceptor sends a call in each state of
// the election, without a network: served here, refused while nobody
// leads, refused when a forwarded call reaches a curator that does not
// lead.
func TestRouting(t *testing.T) {
	remote, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(grpcinsecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	forwardedCtx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(rpc.ForwardedPeerHeader, "owner"))
	for _, tc := range []struct {
		name    string
		leader  leader
		conn    *grpc.ClientConn
		method  string
		ctx     context.Context
		want    codes.Code
		message string
	}{
		{name: "leading", leader: leader{NodeID: "a", Local: true}, method: "/cairn.api.Management/GetNodes", want: codes.OK},
		{name: "nobody leads", method: "/cairn.api.Management/GetNodes", want: codes.Unavailable, message: "no curator leads"},
		{name: "nobody leads, local method", method: "/cairn.api.Curator/GetCurrentLeader", want: codes.OK},
		{name: "forwarded to a follower", leader: leader{NodeID: "b"}, conn: remote, method: "/cairn.api.Management/GetNodes", ctx: forwardedCtx, want: codes.Unavailable, message: "no longer leads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &curator{current: tc.leader, conn: tc.conn}
			c.leaders.Set(tc.leader)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			handler := func(context.Context, any) (any, error) { return "served", nil }
			_, err := c.unaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, handler)
			if got := status.Code(err); got != tc.want || !strings.Contains(status.Convert(err).Message(), tc.message) {
				t.Errorf("%s = %v, want %v saying %q", tc.method, err, tc.want, tc.message)
			}
		})
	}
}

// TestForwardError checks that a forwarded call cut off by the loss of the
// leader's connection reaches its caller as retryable, while the caller's
// own cancellation and the leader's answers pass unchanged.
func TestForwardError(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	closing := status.Error(codes.Canceled, "grpc: the client connection is closing")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want codes.Code
	}{
		{"leader connection closed", context.Background(), closing, codes.Unavailable},
		{"caller cancelled", cancelled, closing, codes.Canceled},
		{"leader refused", context.Background(), status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{"success", context.Background(), nil, codes.OK},
	} {
		if got := status.Code(forwardError(tc.ctx, tc.err)); got != tc.want {
			t.Errorf("%s: forwardError(%v) has code %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
