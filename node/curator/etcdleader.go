package curator

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/supervisor"
)

// The leading curator keeps etcd's leadership on another machine than its
// own. When one machine leads both and dies, etcd first elects a leader,
// and a new etcd leader renews every lease in full (etcd keeps no
// lease's remaining time across its leader changes), so the dead
// curator's election lease outlives it by an etcd election and a whole
// TTL: 13 s with the 10 s lease, in the end-to-end suite. On another
// machine than etcd's leader, the lease only runs out, within the TTL.
//
// etcdLeadershipInterval is how often the leader checks: etcd's leadership
// comes back only with etcd elections, which members leaving or joining
// cause.
const etcdLeadershipInterval = 10 * time.Second

// moveLeaderTimeout bounds one transfer of etcd's leadership: etcd refuses
// proposals while it transfers, for at most an election timeout when the
// transferee does not answer.
const moveLeaderTimeout = 5 * time.Second

// keepEtcdLeadershipAway is the leader's runnable that moves etcd's
// leadership off the local member, now and after every interval, whenever
// the local member leads etcd and another voter can.
func (c *curator) keepEtcdLeadershipAway(ctx context.Context) error {
	raw := c.cfg.Consensus.RawClient()
	if raw == nil {
		return fmt.Errorf("no etcd client")
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	t := time.NewTicker(c.opts.etcdLeadershipInterval)
	defer t.Stop()
	for {
		to, err := moveEtcdLeadership(ctx, raw)
		switch {
		case err != nil && ctx.Err() == nil:
			supervisor.Logger(ctx).Warningf("etcd's leader and the curators' are on this machine: %v", err)
		case to != 0:
			supervisor.Logger(ctx).Infof("moved etcd's leadership to member %x, off the curator leader's machine", to)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// moveEtcdLeadership moves etcd's leadership from the member raw is a
// client of to another voter, if that member leads. It returns the new
// leader's member ID, 0 when it moved nothing: the member does not lead,
// fewer than three members vote (losing either of two loses the quorum
// anyway), or a learner is joining (its promotion, by etcd's leader,
// would wait for the move).
func moveEtcdLeadership(ctx context.Context, raw *clientv3.Client) (uint64, error) {
	eps := raw.Endpoints()
	if len(eps) == 0 {
		return 0, errors.New("the etcd client has no endpoint")
	}
	st, err := raw.Status(ctx, eps[0])
	if err != nil {
		return 0, fmt.Errorf("when asking the local member for its status: %w", err)
	}
	self := st.Header.GetMemberId()
	if st.Leader != self {
		return 0, nil
	}
	members, err := raw.MemberList(ctx)
	if err != nil {
		return 0, fmt.Errorf("when listing the members: %w", err)
	}
	voters := 0
	for _, m := range members.Members {
		if m.IsLearner {
			return 0, nil
		}
		voters++
	}
	if voters < 3 {
		return 0, nil
	}
	var errs []error
	for _, m := range members.Members {
		if m.ID == self {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, moveLeaderTimeout)
		_, err := raw.MoveLeader(mctx, m.ID)
		cancel()
		if err == nil {
			return m.ID, nil
		}
		errs = append(errs, fmt.Errorf("to member %x (%s): %w", m.ID, m.Name, err))
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("when moving etcd's leadership: %w", errors.Join(errs...))
	}
	return 0, nil
}
