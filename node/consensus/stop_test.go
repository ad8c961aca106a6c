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

	n.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace/2)
	defer cancel()
	start := time.Now()
	if _, err := cl.Put(ctx, "last-words", "resigned"); err != nil {
		t.Fatalf("Put right after the Service's context ended: %v, want it served within the stop grace", err)
	}
	t.Logf("last Put served %v after the context ended", time.Since(start))
	n.stop()
}
