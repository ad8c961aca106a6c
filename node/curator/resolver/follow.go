package resolver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/sleep"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// followRetry is the least time between two of Run's tries to follow an
// endpoint.
const followRetry = time.Second

// leaderlessFor is how long Run follows a curator that names no leader
// while other endpoints are known. A curator whose node was cut off names
// none until its own etcd member has caught up and it has entered the
// election again, seconds after the partition healed; the other curators
// name the leader all along, and the node's calls (its heartbeats) should
// go there meanwhile. A real election ends sooner, and when it does not,
// the next curator tells no more than this one: moving costs a dial.
const leaderlessFor = 3 * time.Second

// errLeaderless ends a session whose curator named no leader for
// leaderlessFor while other endpoints were known.
var errLeaderless = fmt.Errorf("the curator named no leader for %v", leaderlessFor)

// Run follows the leadership through one curator endpoint (nextEndpoint):
// it keeps a GetCurrentLeader stream open and tells every ClientConn where
// the leader is. When the stream or the probe of the endpoint fails it
// returns the error, and its supervisor runs it again on another endpoint.
// It waits while no endpoint is known.
//
// Run paces its own tries, one every followRetry at most, and counts as
// healthy from the start of each, so that the supervisor runs the next one
// at once: while the node is cut off every try fails, and the supervisor's
// delay, which doubles at each failure, would otherwise leave the node
// without a leader for up to half a minute after the network is back.
func (r *Resolver) Run(ctx context.Context) error {
	ep, err := r.nextEndpoint(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	conn, err := grpc.NewClient("passthrough:///"+ep, grpc.WithTransportCredentials(r.creds), rpc.ReconnectQuickly())
	if err != nil {
		return fmt.Errorf("when creating client for %s: %w", ep, err)
	}
	defer conn.Close()

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := supervisor.Run(ctx, "probe", r.probe(conn, cancel)); err != nil {
		return fmt.Errorf("when starting probe: %w", err)
	}
	err = r.follow(ctx, sctx, conn, cancel)
	if cause := context.Cause(sctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	r.lostLeader()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.mu.Lock()
	r.failed = ep
	r.mu.Unlock()
	if err := sleep.For(ctx, time.Until(start.Add(followRetry))); err != nil {
		return err
	}
	return fmt.Errorf("following leadership through %s: %w", ep, err)
}

// follow reads the GetCurrentLeader stream of conn until it fails, or until
// it has named no leader for leaderlessFor while another endpoint is known:
// then it ends the session through fail.
func (r *Resolver) follow(ctx, sctx context.Context, conn *grpc.ClientConn, fail context.CancelCauseFunc) error {
	stream, err := api.NewCuratorClient(conn).GetCurrentLeader(sctx, &api.GetCurrentLeaderRequest{})
	if err != nil {
		return fmt.Errorf("when opening stream: %w", err)
	}
	// leaderless runs while the curator names no leader.
	var leaderless *time.Timer
	defer func() {
		if leaderless != nil {
			leaderless.Stop()
		}
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("when receiving: %w", err)
		}
		leader := leaderAddress(msg)
		switch {
		case leader == "" && leaderless == nil:
			leaderless = time.AfterFunc(leaderlessFor, func() {
				if len(r.endpoints()) > 1 {
					fail(errLeaderless)
				}
			})
		case leader != "" && leaderless != nil:
			leaderless.Stop()
			leaderless = nil
		}
		if leader != r.Leader() {
			if leader == "" {
				supervisor.Logger(ctx).Info("no curator leads right now")
			} else {
				supervisor.Logger(ctx).Infof("curator leader: %s (%s)", msg.GetLeaderNodeId(), leader)
			}
		}
		r.setLeader(leader)
	}
}

// leaderAddress is the leader's host:port, "" when none leads.
func leaderAddress(msg *api.GetCurrentLeaderResponse) string {
	if msg.GetLeaderNodeId() == "" || msg.GetLeaderHost() == "" {
		return ""
	}
	port := int(msg.GetLeaderPort())
	if port == 0 {
		port = ports.Curator
	}
	return ports.Join(msg.GetLeaderHost(), port)
}

// probe checks every probeInterval that the curator of conn still answers
// (the first answer of a fresh GetCurrentLeader stream within
// probeTimeout). When it does not, probe ends the session through fail and
// waits to be cancelled with it.
func (r *Resolver) probe(conn *grpc.ClientConn, fail context.CancelCauseFunc) supervisor.Runnable {
	return func(ctx context.Context) error {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		t := time.NewTicker(r.probeInterval)
		defer t.Stop()
		for {
			if err := r.probeOnce(ctx, conn); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fail(fmt.Errorf("curator did not answer the probe: %w", err))
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

func (r *Resolver) probeOnce(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, r.probeTimeout)
	defer cancel()
	stream, err := api.NewCuratorClient(conn).GetCurrentLeader(ctx, &api.GetCurrentLeaderRequest{})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// nextEndpoint returns the endpoint to follow next, waiting while none is
// known: the node's own curator (SetLocal) unless its session was the one
// that just failed, as it learns the leadership from etcd and lives as
// long as this node; else the known endpoints in turn, passing over the
// one that just failed while another is known. A curator whose machine
// died is found out only by the probe, seconds later: following it again
// at once would leave the node without a leader for as long again, and
// its heartbeats unheard by the new leader.
func (r *Resolver) nextEndpoint(ctx context.Context) (string, error) {
	if _, err := event.Get(ctx, &r.known, event.Filter(func(eps []string) bool { return len(eps) > 0 })); err != nil {
		return "", fmt.Errorf("when waiting for a curator endpoint: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	eps := r.endpointsLocked()
	if len(eps) == 0 {
		return "", errors.New("curator endpoints vanished")
	}
	if r.local != "" && r.local != r.failed {
		return r.local, nil
	}
	i := r.next % len(eps)
	if eps[i] == r.failed && len(eps) > 1 {
		i = (i + 1) % len(eps)
	}
	r.next = i + 1
	return eps[i], nil
}
