package curator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/sleep"
	"cairn.dev/cairn/pkg/supervisor"
)

// electionName is the election's prefix (concurrency adds the "/").
const electionName = "election"

// leader is who leads, as this curator last saw it. The zero value means
// nobody does (an election is under way).
type leader struct {
	// NodeID is the leader's node ID.
	NodeID string
	// Addr is where the leader's curator is reached.
	Addr netip.AddrPort
	// Local is set when this curator leads.
	Local bool
}

// electionValue is what a curator campaigns with: its node ID and where it
// is reached, "<node id> <ip:port>".
func electionValue(id string, addr netip.AddrPort) string {
	return id + " " + addr.String()
}

// parseElectionValue reads what electionValue wrote.
func parseElectionValue(v string) (string, netip.AddrPort, error) {
	id, addr, ok := strings.Cut(v, " ")
	if !ok {
		return "", netip.AddrPort{}, fmt.Errorf("election value %q has no address", v)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", netip.AddrPort{}, fmt.Errorf("election value %q: %w", v, err)
	}
	return id, ap, nil
}

// resignTimeout bounds the resignation from the election as the curator
// stops; on a loaded machine the revocation of the lease takes seconds.
const resignTimeout = 4 * time.Second

// runElection campaigns for leadership until ctx ends or the session's
// lease is lost, and runs the observer that follows who leads.
func (c *curator) runElection(ctx context.Context) error {
	cl, err := c.root.Sub(namespace)
	if err != nil {
		return fmt.Errorf("when opening the curator namespace: %w", err)
	}
	cli := clientv3.NewCtxClient(ctx)
	cli.KV, cli.Watcher, cli.Lease = cl.KV, cl.Watcher, cl.Lease
	defer cli.Close()

	me := c.cfg.Node.ID()
	session, err := c.openSession(ctx, cl, cli, me)
	if err != nil {
		return err
	}
	// The session proves that etcd has a quorum again: from here, a death
	// (the lease lost in the next partition) is a new failure, which the
	// supervisor retries after its shortest backoff.
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	// The local etcd stops when this does, as the node goes down: it
	// serves the resignation below first (deferred calls run last first).
	release := c.cfg.Consensus.Hold()
	defer release()
	defer func() {
		// Resign at once, so that another curator takes over without
		// waiting for the lease to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
		defer cancel()
		if _, err := cl.Revoke(rctx, session.Lease()); err != nil {
			supervisor.Logger(ctx).Warningf("Could not resign from the election (the others wait for the lease to expire): %v", err)
		}
	}()
	lease := session.Lease()
	// The observer may outlive this function by a moment (it is
	// cancelled as this returns), while the deferred Close above ends the
	// watches of cl: it reads through a client of its own.
	if err := supervisor.Run(ctx, "observer", func(ctx context.Context) error {
		ocl, err := c.root.Sub(namespace)
		if err != nil {
			return fmt.Errorf("when opening the curator namespace: %w", err)
		}
		defer ocl.Close()
		return c.observe(ctx, ocl, lease)
	}); err != nil {
		return fmt.Errorf("when starting the election observer: %w", err)
	}
	if err := supervisor.Run(ctx, "heartbeats", c.keepHeartbeats); err != nil {
		return fmt.Errorf("when starting to keep heartbeat times: %w", err)
	}
	if err := supervisor.Run(ctx, "health", c.judgeHealth); err != nil {
		return fmt.Errorf("when starting to judge health: %w", err)
	}
	if err := supervisor.Run(ctx, "rollout", c.driveRollouts); err != nil {
		return fmt.Errorf("when starting to drive rollouts: %w", err)
	}
	e := concurrency.NewElection(session, electionName)
	// The session's context ends with its lease too: a campaign must not
	// win on a lease that expired while it waited.
	if err := e.Campaign(session.Ctx(), electionValue(me, c.cfg.Advertise)); err != nil {
		return fmt.Errorf("when campaigning: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-session.Done():
		return errors.New("election session expired: lost the lease")
	}
}

// quorumRetry is how often a curator whose etcd member has no quorum (it
// is cut off from the others, say) tries again to enter the election. A
// steady pace, not the supervisor's growing backoff, so that the curator
// takes part again within about this long once the quorum is back.
const quorumRetry = time.Second

// electionTry bounds one try to enter the election. A lease grant asked
// for while etcd had no leader is lost with its proposal, and etcd answers
// it only after its own request timeout (7 s), however soon the quorum is
// back; a fresh try is served at once. It is well above what a try takes
// on a loaded machine (under a second).
const electionTry = 4 * time.Second

// openSession deletes this node's stale candidacies and opens a session
// for the election, trying again every quorumRetry while etcd fails, as it
// does without a quorum, until ctx ends.
func (c *curator) openSession(ctx context.Context, cl *consensus.Client, cli *clientv3.Client, me string) (*concurrency.Session, error) {
	for failures := 0; ; failures++ {
		start := time.Now()
		session, err := c.tryOpenSession(ctx, cl, cli, me)
		if err == nil {
			if failures > 0 {
				supervisor.Logger(ctx).Infof("In the election again after %d failed tries", failures)
			}
			return session, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if failures%30 == 0 {
			supervisor.Logger(ctx).Warningf("Cannot enter the election (trying every %v): %v", quorumRetry, err)
		}
		if err := sleep.For(ctx, time.Until(start.Add(quorumRetry))); err != nil {
			return nil, err
		}
	}
}

// tryOpenSession is one try of openSession, within electionTry. The
// session it returns lives as long as ctx and its lease.
func (c *curator) tryOpenSession(ctx context.Context, cl *consensus.Client, cli *clientv3.Client, me string) (*concurrency.Session, error) {
	tctx, cancel := context.WithTimeout(ctx, electionTry)
	defer cancel()
	if err := c.deleteStaleCandidacies(tctx, cl, me); err != nil {
		return nil, err
	}
	grant, err := cli.Grant(tctx, int64(c.opts.electionTTL))
	if err != nil {
		return nil, fmt.Errorf("when granting the election lease: %w", err)
	}
	session, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID), concurrency.WithContext(ctx))
	if err != nil {
		// Harmless if it fails: the lease expires by itself.
		cl.Revoke(tctx, grant.ID)
		return nil, fmt.Errorf("when opening an election session: %w", err)
	}
	return session, nil
}

// deleteStaleCandidacies deletes the election keys of this node left by a
// lease of an earlier run (a crash, a restart), whose lease may still be
// alive for up to the election's TTL: without this, this curator would wait for
// its own ghost, or others would follow it.
func (c *curator) deleteStaleCandidacies(ctx context.Context, cl *consensus.Client, me string) error {
	// A serializable read, of the local member's state, suffices: this
	// node's candidacies were written through that member, which applied
	// them before it answered; one it has not yet seen deleted is deleted
	// twice, harmlessly. A linearizable read would wait for the member to
	// catch up with the leader, seconds after a partition heals.
	resp, err := cl.Get(ctx, electionName+"/", clientv3.WithPrefix(), clientv3.WithSerializable())
	if err != nil {
		return fmt.Errorf("when listing candidacies: %w", err)
	}
	for _, kv := range resp.Kvs {
		id, _, err := parseElectionValue(string(kv.Value))
		if err != nil || id != me {
			continue
		}
		supervisor.Logger(ctx).Infof("deleting a stale candidacy of this node (lease %x)", kv.Lease)
		if _, err := cl.Delete(ctx, string(kv.Key)); err != nil {
			return fmt.Errorf("when deleting stale candidacy %s: %w", kv.Key, err)
		}
		if kv.Lease != 0 {
			// Harmless if it has expired already.
			cl.Revoke(ctx, clientv3.LeaseID(kv.Lease))
		}
	}
	return nil
}

// observe follows who leads (the candidacy created first) and publishes
// it, until ctx ends. lease is this curator's own session.
func (c *curator) observe(ctx context.Context, cl *consensus.Client, lease clientv3.LeaseID) error {
	defer c.setLeader(ctx, leader{})
	prefix := electionName + "/"
	// Serializable reads, of the local member's state: what they miss
	// while the member catches up with the leader, the watch from their
	// revision brings as soon as the member has applied it. A linearizable
	// read would leave the curator naming no leader for seconds after a
	// partition heals, while its member catches up.
	first := append(clientv3.WithFirstCreate(), clientv3.WithSerializable())
	for {
		resp, err := cl.Get(ctx, prefix, first...)
		if err != nil {
			return fmt.Errorf("when reading the leader: %w", err)
		}
		l := leader{}
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			id, addr, err := parseElectionValue(string(kv.Value))
			if err != nil {
				supervisor.Logger(ctx).Warningf("unreadable leader: %v", err)
			} else {
				l = leader{NodeID: id, Addr: addr, Local: clientv3.LeaseID(kv.Lease) == lease}
			}
			if l.NodeID == c.cfg.Node.ID() && !l.Local {
				// A candidacy of ours from an earlier lease: forwarding
				// to it would reach ourselves. Nobody leads until it is
				// gone (deleteStaleCandidacies, or its lease expires).
				l = leader{}
			}
		}
		c.setLeader(ctx, l)
		wctx, cancel := context.WithCancel(ctx)
		wch := cl.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		wr, ok := <-wch
		cancel()
		if !ok {
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("election watch ended")
		}
		if err := wr.Err(); err != nil {
			return fmt.Errorf("when watching the election: %w", err)
		}
	}
}

// setLeader publishes l, dials it when it is another curator, and logs
// when leadership moves: taking the lead is marker.CuratorLeading.
func (c *curator) setLeader(ctx context.Context, l leader) {
	c.mu.Lock()
	old := c.current
	if old == l {
		c.mu.Unlock()
		return
	}
	switch {
	case l.Local && !old.Local:
		// Before the first call this curator serves as the leader.
		c.heartbeats.lead(time.Now(), c.opts.heartbeatInterval)
		c.honours.reset()
	case !l.Local && old.Local:
		// The node Watch streams it serves end: it no longer hears the
		// beats their health comes from.
		c.heartbeats.follow()
	}
	oldConn := c.conn
	c.current, c.conn = l, nil
	var dialErr error
	if l.NodeID != "" && !l.Local {
		c.conn, dialErr = grpc.NewClient(l.Addr.String(), grpc.WithTransportCredentials(c.nodeCredentials), rpc.ReconnectQuickly())
	}
	c.mu.Unlock()
	if oldConn != nil {
		oldConn.Close()
	}
	c.leaders.Set(l)
	countLeader(old, l)

	log := supervisor.Logger(ctx)
	switch {
	case dialErr != nil:
		log.Errorf("cannot dial leader %s at %s: %v", l.NodeID, l.Addr, dialErr)
	case l.Local:
		marker.Log(log, marker.CuratorLeading)
	case l.NodeID != "":
		log.Infof("following leader %s", l.NodeID)
	}
}

// route says where a call goes: nil when this curator leads and serves it
// itself, else the connection to the leader.
func (c *curator) route() (*grpc.ClientConn, leader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn, c.current
}
