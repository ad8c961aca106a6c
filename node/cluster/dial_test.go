package cluster

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
)

// TestLiveCluster: an Unavailable answer counts as a live cluster only
// when the curator named a leader; a refusal or silence does not.
func TestLiveCluster(t *testing.T) {
	leader := metadata.Pairs(rpc.LeaderTrailer, "cairn-0123456789abcdef")
	unavailable := status.Error(codes.Unavailable, "the call reached a curator that no longer leads")
	for _, tc := range []struct {
		name    string
		err     error
		trailer metadata.MD
		want    bool
	}{
		{"Unavailable naming a leader", unavailable, leader, true},
		{"Unavailable with no trailer (no curator, or no leader)", unavailable, nil, false},
		{"Unavailable naming nobody", unavailable, metadata.Pairs(rpc.LeaderTrailer, ""), false},
		{"deadline naming a leader", status.Error(codes.DeadlineExceeded, "slow"), leader, true},
		{"refusal naming a leader", status.Error(codes.PermissionDenied, "no"), leader, false},
		{"no gRPC status", errors.New("dial failed"), nil, false},
	} {
		if got := liveCluster(tc.err, tc.trailer); got != tc.want {
			t.Errorf("%s: liveCluster = %v, want %v", tc.name, got, tc.want)
		}
	}
}
