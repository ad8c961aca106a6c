package consensus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/fixture"
)

// TestNoAcknowledgedWriteLost writes without pause into a three-member
// cluster while each member in turn is stopped and started again, then
// reads every write that etcd acknowledged back through every member: not
// one may be missing. Writes that failed (their member went down under
// them) are allowed to be either there or not.
func TestNoAcknowledgedWriteLost(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts etcd members for about a minute; skipped under -short")
	}
	ctx := fixture.ContextTimeout(t, testTimeout)
	nodes := []*testNode{newTestNode(t), newTestNode(t), newTestNode(t)}
	nodes[0].start(t)
	st0 := nodes[0].waitVoter(t)
	for _, n := range nodes[1:] {
		join(t, ctx, st0, n)
		n.waitVoter(t)
	}

	// The writer writes through the client the test hands it, which the
	// test points away from a member before it stops it.
	var (
		client  atomic.Pointer[Client]
		mu      sync.Mutex
		acked   []string
		failed  int
		stopped = make(chan struct{})
		done    = make(chan struct{})
	)
	client.Store(st0.Client())
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stopped:
				return
			default:
			}
			key := fmt.Sprintf("durability/%06d", i)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := client.Load().Put(wctx, key, key)
			cancel()
			mu.Lock()
			if err == nil {
				acked = append(acked, key)
			} else {
				failed++
			}
			mu.Unlock()
		}
	}()
	written := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitWrites := func(more int) {
		t.Helper()
		want := written() + more
		fixture.Eventually(t, time.Minute, fmt.Sprintf("%d acknowledged writes", want), func() error {
			if n := written(); n < want {
				return fmt.Errorf("%d so far", n)
			}
			return nil
		})
	}

	waitWrites(20)
	for i, n := range nodes {
		client.Store(nodes[(i+1)%len(nodes)].waitVoter(t).Client())
		n.stop()
		waitWrites(20) // the cluster goes on with two of three
		n.start(t)
		n.waitVoter(t)
		waitWrites(20)
	}
	close(stopped)
	<-done

	mu.Lock()
	keys, lost := append([]string(nil), acked...), failed
	mu.Unlock()
	for _, n := range nodes {
		st := n.waitVoter(t)
		resp, err := st.Client().Get(ctx, "durability/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("%s: reading back: %v", n.cfg.Name, err)
		}
		have := make(map[string]bool, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = string(kv.Value) == string(kv.Key)
		}
		for _, k := range keys {
			if !have[k] {
				t.Errorf("%s: acknowledged write %s is missing or damaged", n.cfg.Name, k)
			}
		}
	}
	t.Logf("%d writes acknowledged, %d failed while members restarted; every acknowledged one is readable through every member", len(keys), lost)
}
