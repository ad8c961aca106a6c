package curator

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/fixture"
)

// withEtcdLeadershipInterval sets how often the leader checks etcd's
// leadership.
func withEtcdLeadershipInterval(d time.Duration) Option {
	return func(o *options) { o.etcdLeadershipInterval = d }
}

// etcdLeader returns the member ID of etcd's leader, as the member raw is
// a client of sees it.
func etcdLeader(ctx context.Context, raw *clientv3.Client) (uint64, error) {
	st, err := raw.Status(ctx, raw.Endpoints()[0])
	if err != nil {
		return 0, err
	}
	return st.Leader, nil
}

// TestEtcdLeadershipAway forms three etcd members under three curators,
// the first of which leads both, and checks that the leading curator
// moves etcd's leadership to another member, and again when etcd's
// leadership comes back to it.
func TestEtcdLeadershipAway(t *testing.T) {
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option(), withEtcdLeadershipInterval(200*time.Millisecond))
	ctx := fixture.ContextTimeout(t, 5*time.Minute)
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	for range 2 {
		c.addMember(t, n0.addr.String(), newTestNode(t), ports)
	}
	if got := waitLeader(t, n0, n0.addr.String(), ""); got != n0.id() {
		t.Fatalf("the curators' leader is %s, want the first node %s", got, n0.id())
	}
	st := n0.member.WaitVoter(t)
	raw, own := st.RawClient(), st.ID
	away := func(what string) uint64 {
		var leader uint64
		fixture.Eventually(t, time.Minute, what, func() error {
			l, err := etcdLeader(ctx, raw)
			switch {
			case err != nil:
				return err
			case l == 0:
				return fmt.Errorf("etcd has no leader")
			case l == own:
				return fmt.Errorf("etcd's leader is the leading curator's member %x", own)
			}
			leader = l
			return nil
		})
		return leader
	}
	other := away("etcd's leadership moved off the leading curator's machine")
	t.Logf("etcd's leader moved from %x to %x", own, other)

	// Bring etcd's leadership back, as an etcd election may: it leaves
	// again.
	fixture.Eventually(t, time.Minute, "moving etcd's leadership back", func() error {
		var errs []error
		for _, n := range c.nodes {
			// Only etcd's leader moves the leadership; the others refuse.
			mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := n.member.WaitVoter(t).RawClient().MoveLeader(mctx, own)
			cancel()
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return fmt.Errorf("no member moved the leadership: %v", errs)
	})
	away("etcd's leadership moved off again")
}
