package consensus

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
)

// join adds n to the cluster through the voting member st and starts it.
func join(t *testing.T, ctx context.Context, st *Status, n *testNode) {
	t.Helper()
	j, err := st.AddLearner(ctx, n.cfg.Name, n.cfg.PeerURL(), n.cfg.PrivateKey.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatalf("AddLearner(%s): %v", n.cfg.Name, err)
	}
	n.cfg.Join = j
	n.start(t)
}

// TestCluster bootstraps one member, joins two learners that get promoted,
// stops one and checks that the other two still commit writes, then
// restarts it and checks that it catches up.
func TestCluster(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	nodes := []*testNode{newTestNode(t), newTestNode(t), newTestNode(t)}

	start := time.Now()
	nodes[0].start(t)
	st0 := nodes[0].waitVoter(t)
	t.Logf("bootstrap of the first member took %v", time.Since(start))

	for i, n := range nodes[1:] {
		start := time.Now()
		join(t, ctx, st0, n)
		st := n.waitRunning(t)
		running := time.Since(start)
		if !st.Learner {
			// Promotion may win the race against our first look.
			t.Logf("member %d was already promoted when first seen running", i+1)
		}
		n.waitVoter(t)
		t.Logf("member %d: running as learner after %v, promoted after %v", i+1, running, time.Since(start))
	}

	list, err := st0.raw.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 {
		t.Fatalf("cluster has %d members, want 3", len(list.Members))
	}
	for _, m := range list.Members {
		if m.IsLearner {
			t.Errorf("member %s is still a learner", m.Name)
		}
	}

	// Every member sees a write made through another.
	if _, err := st0.Client().Put(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		st := n.waitVoter(t)
		resp, err := st.Client().Get(ctx, "a")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "1" {
			t.Errorf("member %d: Get(a) = %v, %v, want 1", i, resp, err)
		}
	}

	// Kill member 2: writes still commit with 2 of 3.
	nodes[2].stop()
	st1 := nodes[1].waitVoter(t)
	for i := range 10 {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := st1.Client().Put(wctx, fmt.Sprintf("down/%d", i), "x")
		cancel()
		if err != nil {
			t.Fatalf("Put with one member down: %v", err)
		}
	}

	// Restart it on its data: it catches up with what it missed.
	nodes[2].start(t)
	st2 := nodes[2].waitVoter(t)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := st2.Client().Get(ctx, "down/9")
		if err == nil && len(resp.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member did not catch up: %v, %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
