package consensus

import (
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
)

func TestBootstrap(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	n := newTestNode(t)
	if has, err := HasData(n.cfg.DataDir); has || err != nil {
		t.Errorf("HasData(%q) before the first start = %v, %v, want false, nil", n.cfg.DataDir, has, err)
	}
	start := time.Now()
	n.start(t)
	st := n.waitRunning(t)
	t.Logf("bootstrap of a single member took %v", time.Since(start))
	if st.Learner || st.Name != n.cfg.Name || st.ID == 0 {
		t.Errorf("Status = %+v, want a voting member called %q", st, n.cfg.Name)
	}
	if _, err := st.Client().Put(ctx, "hello", "world"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if srv := st.Server(); srv == nil || uint64(srv.MemberID()) != st.ID {
		t.Errorf("Status.Server() = %v, want the running member %x itself", srv, st.ID)
	}
	list, err := st.raw.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 1 || len(list.Members[0].PeerURLs) != 1 || list.Members[0].PeerURLs[0] != n.cfg.PeerURL() {
		t.Errorf("members = %v, want one advertising %s", list.Members, n.cfg.PeerURL())
	}

	// Restart on the same data: TLS from the start, the data is there.
	n.stop()
	if has, err := HasData(n.cfg.DataDir); !has || err != nil {
		t.Errorf("HasData(%q) after a run = %v, %v, want true, nil", n.cfg.DataDir, has, err)
	}
	n.start(t)
	st = n.waitRunning(t)
	resp, err := st.Client().Get(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "world" {
		t.Errorf("after restart, Get(hello) = %v, want world", resp.Kvs)
	}
}
