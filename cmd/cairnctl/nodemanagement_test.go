package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// TestAgainstNodeManagement runs logs, logs -f, reboot and poweroff
// against the real NodeManagement service over a node's rpc server.
func TestAgainstNodeManagement(t *testing.T) {
	dir, s := bootstrapped(t)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")

	lt := logtree.New()
	rebooted := make(chan struct{})
	poweredOff := make(chan struct{})
	node := s.ca.Node(t)
	srv := rpc.NewServer(node)
	api.RegisterNodeManagementServer(srv, nodemanagement.New(nodemanagement.Config{
		LogTree:  lt,
		Reboot:   func() { close(rebooted) },
		Poweroff: func() { close(poweredOff) },
	}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ctx, lis)
	}()
	defer func() {
		cancel()
		<-served
	}()
	id := node.ID()
	nodeEP := "--node-endpoint=" + id + "=" + lis.Addr().String()

	// Markers are entries like any other: they reach cairnctl logs whole,
	// for tests to read back with marker.Parse.
	marker.Log(lt.LeveledFor("root.cluster"), marker.Committed, "node", id)
	lt.LeveledFor("root.network").Warning("no carrier")
	raw := lt.RawFor("root.kmod")
	raw.Write([]byte("loaded virtio_net\n"))

	// The expected lines are the tree's own String form.
	r, err := lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, e := range r.Backlog {
		want.WriteString(e.String() + "\n")
	}
	r.Close()
	if out := mustRun(t, dir, nodeEP, "logs", id); out != want.String() {
		t.Errorf("logs printed\n%s\nwant\n%s", out, want.String())
	}
	out := mustRun(t, dir, nodeEP, "logs", id, "--dn", "root.network", "--min-severity", "warning")
	if !strings.Contains(out, "root.network") || !strings.Contains(out, "] no carrier") || strings.Count(out, "\n") != 1 {
		t.Errorf("logs --dn root.network --min-severity warning printed %q, want the one warning", out)
	}

	var follow fixture.SyncBuffer
	fctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runTo(fctx, &follow, dir, nodeEP, "logs", "-f", "--backlog", "0", id) }()
	// Log until the follower has seen an entry: it may subscribe after
	// the first ones.
	for !hasMarker(follow.String(), marker.ConsensusRunning) {
		marker.Log(lt.LeveledFor("root.roleserve"), marker.ConsensusRunning, "voting", "true")
		select {
		case err := <-done:
			t.Fatalf("logs -f ended by itself: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("logs -f interrupted = %v, want nil", err)
	}
	if hasMarker(follow.String(), marker.Committed) {
		t.Errorf("logs -f --backlog 0 printed the backlog: %q", follow.String())
	}

	mustRun(t, dir, nodeEP, "node", "reboot", id)
	select {
	case <-rebooted:
	case <-time.After(30 * time.Second):
		t.Error("node reboot: the node was not rebooted")
	}
	if _, err := run(t, dir, nodeEP, "node", "poweroff", id); err == nil {
		t.Error("node poweroff after a reboot succeeded, want the node to refuse")
	}
}

// hasMarker reports whether a line of out states the marker name.
func hasMarker(out string, name marker.Name) bool {
	for _, l := range strings.Split(out, "\n") {
		if m, ok := marker.Parse(l); ok && m.Name == name {
			return true
		}
	}
	return false
}
