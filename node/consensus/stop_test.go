package consensus

import (
	"context"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/logtree"
)

// TestStopGrace checks that etcd still serves a last call made just after
// the Service's context ended: the curator's resignation from its
// election is such a call.
func TestStopGrace(t *testing.T) {
	n := newTestNode(t)
	// A grace far longer than stopGrace: on a loaded machine a Put can
	// take seconds, and what is tested here is that a hold keeps etcd
	// serving, not how fast it serves. TestStopGraceEnds tests the bound.
	n.grace = testTimeout
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

	release := st.Hold()
	n.cancel()
	// Past the moment etcd would close without the hold.
	time.Sleep(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	if _, err := cl.Put(ctx, "last-words", "resigned"); err != nil {
		t.Fatalf("Put while held after the Service's context ended: %v, want it served", err)
	}
	t.Logf("last Put served %v after the context ended", time.Since(start))
	release()
	release() // a second release changes nothing
	n.stop()
}

// TestStopGraceEnds: a hold that is never released keeps etcd for the
// grace only, then the Service stops and says so.
func TestStopGraceEnds(t *testing.T) {
	n := newTestNode(t)
	n.grace = 300 * time.Millisecond
	n.start(t)
	st := n.waitVoter(t)
	release := st.Hold()
	defer release()
	n.cancel()
	stopped := make(chan struct{})
	go func() {
		n.sup.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatalf("the Service did not stop within %v of its grace with a hold left", testTimeout)
	}
	r, err := n.lt.Read("root", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, e := range r.Backlog {
		if strings.Contains(e.Message, "with a user still holding it") {
			return
		}
	}
	t.Errorf("no warning that etcd stopped with a hold left")
}
