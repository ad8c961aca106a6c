package cluster

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	api "cairn.dev/cairn/proto/api"
)

// curatorTargets lists host:port of every curator in d, in the
// directory's order, leaving out the node called skip (this node itself,
// which runs no curator before it has enrolled).
func (s *Service) curatorTargets(d *api.ClusterDirectory, skip string) []string {
	var t []string
	for _, n := range d.GetNodes() {
		if n.GetId() == skip {
			continue
		}
		for _, a := range n.GetAddresses() {
			t = append(t, ports.Join(a.GetHost(), s.cfg.Ports.Curator))
		}
	}
	return t
}

// withCurator dials target with ephemeral credentials (the cluster CA of
// caDER pinned, key presented in a self-signed certificate) and calls f
// with a Curator client, within one call timeout.
func (s *Service) withCurator(ctx context.Context, target string, caDER []byte, key ed25519.PrivateKey, f func(context.Context, api.CuratorClient) error) error {
	creds, err := rpc.EphemeralCredentials(caDER, key)
	if err != nil {
		return fmt.Errorf("when building credentials: %w", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("when dialling %s: %w", target, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, s.timing.callTimeout)
	defer cancel()
	return f(ctx, api.NewCuratorClient(conn))
}

// unreachable says whether err means the curator did not answer at all,
// as opposed to answering with a refusal or a failure of its own.
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// liveCluster says whether err, though it reads as "no answer"
// (Unavailable), came from a curator that named a leader in its trailer: a
// live cluster, whose failure is passing, not nobody.
func liveCluster(err error, trailer metadata.MD) bool {
	return unreachable(err) && len(trailer.Get(rpc.LeaderTrailer)) > 0 && trailer.Get(rpc.LeaderTrailer)[0] != ""
}

// refused says whether err is the cluster saying no to this node: a
// wrong ticket, an unknown or decommissioned node, a key that does not
// match.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument:
		return true
	}
	return false
}

// reason is the message of a gRPC error, for console lines.
func reason(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s (%s)", st.Message(), st.Code())
	}
	return err.Error()
}
