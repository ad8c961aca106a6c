package consensus

import (
	"context"
	"slices"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"

	"cairn.dev/cairn/pkg/supervisor"
)

// How often the membership worker looks at the cluster, and how long it
// waits at most between two promotions of a learner that is not yet caught
// up.
const (
	membershipInterval = 500 * time.Millisecond
	promoteBackoffMax  = 10 * time.Second
)

// runMembership keeps the Status's Learner flag current and, on the leader,
// promotes learners to voting members. etcd refuses to promote a learner
// that has not caught up with the leader's log, so each learner is retried
// with a backoff of its own until it succeeds.
func (s *Service) runMembership(inst *instance) supervisor.Runnable {
	return func(ctx context.Context) error {
		lg := supervisor.Logger(ctx)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		srv := inst.e.Server
		type retry struct {
			at      time.Time
			backoff time.Duration
		}
		retries := make(map[types.ID]*retry)
		t := time.NewTicker(membershipInterval)
		defer t.Stop()
		for {
			members := srv.Cluster().Members()
			learner, ok := isLearner(inst)
			if !ok {
				// Removed: Run notices and stops etcd.
				<-ctx.Done()
				return ctx.Err()
			}
			s.setStatusIfChanged(learner)
			if !learner && srv.Leader() == srv.MemberID() {
				now := time.Now()
				for _, m := range members {
					if !m.IsLearner {
						delete(retries, m.ID)
						continue
					}
					r := retries[m.ID]
					if r == nil {
						r = &retry{backoff: membershipInterval}
						retries[m.ID] = r
					}
					if now.Before(r.at) {
						continue
					}
					if _, err := inst.client.MemberPromote(ctx, uint64(m.ID)); err != nil {
						if ctx.Err() != nil {
							return ctx.Err()
						}
						lg.Infof("learner %x (%s) not promoted yet, retrying in %v: %v", uint64(m.ID), m.Name, r.backoff, err)
						r.at = now.Add(r.backoff)
						r.backoff = min(2*r.backoff, promoteBackoffMax)
						continue
					}
					lg.Infof("promoted learner %x (%s) to voting member", uint64(m.ID), m.Name)
					delete(retries, m.ID)
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

func (s *Service) setStatusIfChanged(learner bool) {
	s.mu.Lock()
	same := s.last != nil && s.last.Learner == learner
	s.mu.Unlock()
	if !same {
		s.setStatus(func(st *Status) { st.Learner = learner })
	}
}

// isLearner tells whether the local member is a learner, and whether it is
// a member at all. (etcd's own IsLearner panics once the member has been
// removed.)
func isLearner(inst *instance) (learner, ok bool) {
	srv := inst.e.Server
	members := srv.Cluster().Members()
	i := slices.IndexFunc(members, func(m *membership.Member) bool { return m.ID == srv.MemberID() })
	if i < 0 {
		return false, false
	}
	return members[i].IsLearner, true
}
