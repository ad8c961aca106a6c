//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestUpdateRollout rolls releases out over a cluster of two nodes booted
// through OVMF, the consensus member (which leads the curator) and a node
// without roles, with cairnctl cluster update as an owner would:
//
//	(f) the build's version to 1.0.0: the member first, then the other
//	    node, each given the release only once the one before proved it
//	    healthy; the rollout survives its leader rebooting into the
//	    release, and ends done with both nodes on 1.0.0;
//	(g) 1.0.1, whose kernel panics at boot: the member rolls back by
//	    itself, the rollout halts on it with the release recorded bad,
//	    the other node is never given it, a new rollout of it is refused
//	    until the owner clears it.
func TestUpdateRollout(t *testing.T) {
	s := newSuite(t, 30*time.Minute)
	cfg := s.clusterConfig(2, 0)
	cfg.Registry = artifact(t, "registry")
	c := s.startCluster(cfg)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the cluster: %v", err)
	}
	key, rb := readReleaseKey(t), newReleaseBuilder(t, c)
	member, other := c.Node(0), c.Node(1)
	built := readVersion(t)

	t.Run("f-rollout", func(t *testing.T) {
		ref := rb.pushUKI(t, "rollout-1.0.0", "1.0.0", testUKI(t, "1.0.0"), key)
		from0, from1 := member.Mark(), other.Mark()
		start := time.Now()
		out, err := s.rollout(c, "--image", ref)
		if err != nil {
			t.Fatalf("cluster update start %s: %v\n%s", ref, err, out)
		}
		s.step("rollout over 2 nodes → done", time.Since(start))
		proved0 := s.waitNode(t, member, from0, launch.Substring("proved itself healthy"))
		trial1 := s.waitNode(t, other, from1, launch.Substring("unified kernel image once (BootNext), for a trial"))
		proved1 := s.waitNode(t, other, trial1.Index, launch.Substring("proved itself healthy"))
		if trial1.Time.Before(proved0.Time) {
			t.Errorf("the second node booted its trial at %s, before the member proved itself at %s", trial1.Time.Format(time.TimeOnly), proved0.Time.Format(time.TimeOnly))
		}
		s.step("  start → member proved 1.0.0", proved0.Time.Sub(start))
		s.step("  member proved → other node proved 1.0.0", proved1.Time.Sub(proved0.Time))
		st := s.rolloutStatus(t, c)
		if st.Rollout.State != "done" || st.Rollout.Version != "1.0.0" || len(st.Rollout.Steps) != 2 || st.Rollout.Steps[0].Node != member.ID() {
			t.Errorf("cluster update status = %+v, want done, 1.0.0, two steps, the member's first", st.Rollout)
		}
		for _, n := range []*cluster.Node{member, other} {
			s.checkSlots(t, c, n.ID(), slotView{"a", false, "good", built, ""}, slotView{"b", true, "good", "1.0.0", ""})
		}
	})

	t.Run("g-failing-release-halts", func(t *testing.T) {
		ref := rb.pushUKI(t, "rollout-panic", "1.0.1", testUKI(t, "panic"), key)
		from0, from1 := member.Mark(), other.Mark()
		start := time.Now()
		out, err := s.rollout(c, "--image", ref)
		if err == nil || !strings.Contains(out+err.Error(), "before it was healthy") {
			t.Fatalf("cluster update start of a release that panics: %v\n%s\nwant it to fail saying the member's trial ended before it was healthy", err, out)
		}
		s.step("rollout of a panicking release → halted", time.Since(start))
		panicked := s.waitNode(t, member, from0, launch.Substring("Kernel panic"))
		serving := s.waitNode(t, member, panicked.Index, launch.Mark(marker.CuratorServing))
		s.step("  start → member back on 1.0.0, serving", serving.Time.Sub(start))
		if l, ok := other.VM().Console().Find(from1, launch.Substring("1.0.1")); ok {
			t.Errorf("the node after the failed one heard of 1.0.1: %s", cluster.Message(l.Text))
		}
		st := s.rolloutStatus(t, c)
		if st.Rollout.State != "halted" || len(st.BadReleases) != 1 || st.BadReleases[0].Version != "1.0.1" || st.BadReleases[0].Node != member.ID() {
			t.Fatalf("cluster update status = %+v, want halted with 1.0.1 recorded bad on the member", st)
		}
		if st.Rollout.Steps[1].Phase != "pending" {
			t.Errorf("the other node's step is %+v, want pending", st.Rollout.Steps[1])
		}
		s.checkSlots(t, c, member.ID(), slotView{"a", false, "bad", "1.0.1", ""}, slotView{"b", true, "good", "1.0.0", ""})
		if out, err := s.rollout(c, "--image", ref, "--no-wait"); err == nil || !strings.Contains(out+err.Error(), "recorded bad") {
			t.Errorf("a new rollout of the bad release: %v\n%s\nwant it refused as recorded bad", err, out)
		}
		s.cairnctl(t, c, "cluster", "update", "clear-bad", st.BadReleases[0].Digest)
		if st := s.rolloutStatus(t, c); len(st.BadReleases) != 0 {
			t.Errorf("after clear-bad the status lists bad releases %+v", st.BadReleases)
		}
	})
}

// rollout runs cairnctl cluster update start with args and returns its
// output.
func (s *suite) rollout(c *cluster.Cluster, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Minute)
	defer cancel()
	out, err := c.Cairnctl(ctx, append([]string{"cluster", "update", "start", "--trial-deadline", "5m"}, args...)...)
	return string(out), err
}

// rolloutView is what cairnctl -o json cluster update status prints.
type rolloutView struct {
	Rollout struct {
		State   string `json:"state"`
		Version string `json:"version"`
		Digest  string `json:"digest"`
		Steps   []struct {
			Node    string `json:"node_id"`
			Phase   string `json:"phase"`
			Message string `json:"message"`
			Evicted int    `json:"evicted_pods"`
		} `json:"steps"`
	} `json:"rollout"`
	BadReleases []struct {
		Digest  string `json:"digest"`
		Version string `json:"version"`
		Node    string `json:"node_id"`
		Reason  string `json:"reason"`
	} `json:"bad_releases"`
}

// rolloutStatus reads cairnctl cluster update status.
func (s *suite) rolloutStatus(t *testing.T, c *cluster.Cluster) rolloutView {
	t.Helper()
	out := s.cairnctl(t, c, "-o", "json", "cluster", "update", "status")
	t.Logf("cairnctl cluster update status: %s", strings.TrimSpace(out))
	var v rolloutView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("cluster update status printed %q: %v", out, err)
	}
	return v
}
