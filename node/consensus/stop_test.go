package consensus

import (
	"context"
	"testing"
	"time"
)

// TestStopGrace checks that etcd still serves a last call made just after
// the Service's context ended: the curator's resignation from its
// election is such a call.
func TestStopGrace(t *testing.T) {
	n := newTestNode(t)
	n.start(t)
	st := n.waitVoter(t)
	cl := st.Client()
	// A first write waits out etcd's election after its start, so that
	// the one below measures only what the grace allows.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if _, err := cl.Put(wctx, "first-words", "running"); err != nil {
		t.Fatalf("Put while running: %v", err)
	}

	n.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	defer cancel()
	start := time.Now()
	if _, err := cl.Put(ctx, "last-words", "resigned"); err != nil {
		t.Fatalf("Put right after the Service's context ended: %v, want it served within the stop grace", err)
	}
	t.Logf("last Put served %v after the context ended", time.Since(start))
	n.stop()
}
