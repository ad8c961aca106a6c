package consensus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
)

// TestPeerRenewal gives etcd peer certificates a lifetime of seconds: each
// member renews its own before it ends, and once the first certificates
// have expired a restarted member still handshakes with its peer and
// catches up, which only renewed certificates allow.
func TestPeerRenewal(t *testing.T) {
	const lifetime = 12 * time.Second
	old := peerLifetime
	peerLifetime = lifetime
	t.Cleanup(func() { peerLifetime = old })

	ctx := fixture.ContextTimeout(t, testTimeout)
	a, b := newTestNode(t), newTestNode(t)
	a.start(t)
	stA := a.waitVoter(t)
	join(t, ctx, stA, b)
	b.waitVoter(t)

	first, err := b.svc.peerCertificateFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := first.NotAfter.Sub(first.NotBefore); got > 2*lifetime {
		t.Fatalf("peer certificate valid for %v, want about %v", got, lifetime)
	}
	time.Sleep(time.Until(first.NotAfter.Add(time.Second)))
	for name, n := range map[string]*testNode{"A": a, "B": b} {
		c, err := n.svc.peerCertificateFile()
		if err != nil {
			t.Fatal(err)
		}
		if !c.NotAfter.After(time.Now()) {
			t.Errorf("member %s: peer certificate ended at %v and was not renewed", name, c.NotAfter)
		}
	}

	// B restarts: its new peer connections use the renewed certificates,
	// and a write through it commits only if A accepts them.
	b.stop()
	b.start(t)
	stB := b.waitVoter(t)
	fixture.Eventually(t, time.Minute, "a write through B after its restart", func() error {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := stB.Client().Put(wctx, "after-renewal", "1"); err != nil {
			return err
		}
		resp, err := stA.Client().Get(wctx, "after-renewal")
		if err != nil {
			return err
		}
		if len(resp.Kvs) != 1 {
			return fmt.Errorf("A does not see the write made through B")
		}
		return nil
	})
}
