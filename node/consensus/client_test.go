package consensus

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/fixture"
)

// TestNamespaces checks that namespaced clients cannot see or touch each
// other's keys, and where their keys really live.
func TestNamespaces(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	n := newTestNode(t)
	n.start(t)
	root := n.waitRunning(t).Client()

	sub := func(c *Client, space string) *Client {
		t.Helper()
		s, err := c.Sub(space)
		if err != nil {
			t.Fatalf("Sub(%q): %v", space, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	curator := sub(root, "curator")
	kube := sub(root, "kubernetes")
	leases := sub(curator, "leases")

	for _, p := range []struct {
		c    *Client
		k, v string
	}{
		{curator, "x", "curator"},
		{curator, "y", "curator"},
		{kube, "x", "kubernetes"},
		{leases, "x", "leases"},
	} {
		if _, err := p.c.Put(ctx, p.k, p.v); err != nil {
			t.Fatalf("Put(%q) in %q: %v", p.k, p.c.Prefix(), err)
		}
	}

	keys := func(c *Client) map[string]string {
		t.Helper()
		resp, err := c.Get(ctx, "", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("Get in %q: %v", c.Prefix(), err)
		}
		m := make(map[string]string)
		for _, kv := range resp.Kvs {
			m[string(kv.Key)] = string(kv.Value)
		}
		return m
	}
	if diff := cmp.Diff(map[string]string{"x": "kubernetes"}, keys(kube)); diff != "" {
		t.Errorf("kubernetes sees (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"x": "curator", "y": "curator", "leases/x": "leases"}, keys(curator)); diff != "" {
		t.Errorf("curator sees (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"x": "leases"}, keys(leases)); diff != "" {
		t.Errorf("curator/leases sees (-want +got):\n%s", diff)
	}
	all := keys(root)
	for k, want := range map[string]string{"curator/x": "curator", "kubernetes/x": "kubernetes", "curator/leases/x": "leases"} {
		if all[k] != want {
			t.Errorf("root sees %q = %q, want %q", k, all[k], want)
		}
	}

	// Deleting everything in one namespace leaves the others alone.
	if _, err := kube.Delete(ctx, "", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if got := keys(kube); len(got) != 0 {
		t.Errorf("kubernetes after deleting all: %v", got)
	}
	if got := keys(curator); len(got) != 3 {
		t.Errorf("curator after kubernetes deleted all: %v", got)
	}

	// Watches see their own namespace only.
	wctx, cancel := clientv3WatchContext(ctx)
	defer cancel()
	wch := kube.Watch(wctx, "", clientv3.WithPrefix())
	if _, err := curator.Put(ctx, "z", "not for kubernetes"); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Put(ctx, "z", "for kubernetes"); err != nil {
		t.Fatal(err)
	}
	wr := <-wch
	if err := wr.Err(); err != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "z" || string(wr.Events[0].Kv.Value) != "for kubernetes" {
		t.Errorf("kubernetes watch got %+v (err %v), want one put of z = for kubernetes", wr.Events, err)
	}

	for _, bad := range []string{"", "a/b"} {
		if _, err := root.Sub(bad); err == nil {
			t.Errorf("Sub(%q) succeeded, want an error", bad)
		}
	}
}

func clientv3WatchContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(clientv3.WithRequireLeader(ctx))
}

// TestCloseWhileWatching closes a Client while others start watches on
// it, as a server's streams do while it stops: no race, and a watch
// started after Close gets a closed channel at once.
func TestCloseWhileWatching(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	n := newTestNode(t)
	n.start(t)
	c, err := n.waitRunning(t).Client().Sub("watching")
	if err != nil {
		t.Fatalf("Sub: %v", err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			c.Watch(wctx, "k")
		}()
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	select {
	case _, ok := <-c.Watch(ctx, "k"):
		if ok {
			t.Errorf("a watch started after Close delivered a response")
		}
	case <-ctx.Done():
		t.Fatalf("a watch started after Close did not end: %v", ctx.Err())
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
}
