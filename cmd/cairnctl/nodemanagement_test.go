package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/metrics"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/update/updatetest"
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
	rebooted := make(chan string, 2)
	poweredOff := make(chan struct{})
	node := s.ca.Node(t)
	addr := serveNodeManagement(t, node, nodemanagement.Config{
		LogTree:        lt,
		Reboot:         func() { rebooted <- "kexec" },
		RebootFirmware: func() { rebooted <- "firmware" },
		Poweroff:       func() { close(poweredOff) },
		Metrics:        metrics.Gatherer("/proc"),
	})
	id := node.ID()
	nodeEP := "--node-endpoint=" + id + "=" + addr

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

	// The resources are this test machine's: the test's own process is
	// among them, in procfs of the real node too.
	var res resourcesView
	if err := json.Unmarshal([]byte(mustRun(t, dir, nodeEP, "-o", "json", "node", "resources", id)), &res); err != nil {
		t.Fatalf("node resources -o json: %v", err)
	}
	self := false
	for _, p := range res.Processes {
		if int(p.PID) == os.Getpid() {
			self = true
			if p.AnonymousBytes == 0 || p.FileBytes == 0 || p.AnonymousBytes+p.FileBytes > p.ResidentBytes*11/10 || p.ProportionalBytes == 0 {
				t.Errorf("node resources: the test's process %+v, want its resident memory split into anonymous and file pages, and its PSS", p)
			}
		}
	}
	if res.MemoryTotalBytes == 0 || !self {
		t.Errorf("node resources = %d bytes of memory, %d processes without pid %d; want memory and the test's process", res.MemoryTotalBytes, len(res.Processes), os.Getpid())
	}
	if out := mustRun(t, dir, nodeEP, "node", "resources", id); !strings.Contains(out, "Memory: ") || !strings.Contains(out, "Processes: ") || !strings.Contains(out, "RESIDENT") || !strings.Contains(out, " PSS ") || !strings.Contains(out, " ANON ") || !strings.Contains(out, " FILE ") || !strings.Contains(out, "busy since boot") {
		t.Errorf("node resources printed %q, want the memory and CPU lines and the process table", out)
	}

	// Over a second, the node (this test's process, burning CPU) shows
	// the CPU it used, busiest first with the children each reaped.
	// Another process (a compiler, when go test builds packages beside
	// this one) may have used more.
	burn, stopBurn := context.WithCancel(context.Background())
	go func() {
		for x := 0; burn.Err() == nil; x++ {
			_ = x * x
		}
	}()
	var over resourcesView
	err = json.Unmarshal([]byte(mustRun(t, dir, nodeEP, "-o", "json", "node", "resources", id, "--over", "1s")), &over)
	stopBurn()
	if err != nil {
		t.Fatalf("node resources --over 1s -o json: %v", err)
	}
	i := slices.IndexFunc(over.Processes, func(p processView) bool { return p.PID == int32(os.Getpid()) })
	sorted := slices.IsSortedFunc(over.Processes, func(a, b processView) int {
		return cmp.Compare(b.CPUOverMillis+b.ChildrenCPUOverMillis, a.CPUOverMillis+a.ChildrenCPUOverMillis)
	})
	if over.OverMillis < 1000 || i < 0 || over.Processes[i].CPUOverMillis < 200 || !sorted {
		t.Errorf("node resources --over 1s: %d ms apart, processes %+v; want at least 1 s, the test's busy process with its CPU, busiest first", over.OverMillis, over.Processes[:min(5, len(over.Processes))])
	}
	// The node's busy time counts this process's, and all else busy on
	// the machine (a tick's rounding apart).
	if i >= 0 && (over.CPUAllOverMillis == 0 || over.CPUBusyOverMillis+20 < over.Processes[i].CPUOverMillis) {
		t.Errorf("node resources --over 1s: the node busy %d ms of %d, the test's process %d ms; want the node's busy time to count the process's", over.CPUBusyOverMillis, over.CPUAllOverMillis, over.Processes[i].CPUOverMillis)
	}

	if out := mustRun(t, dir, nodeEP, "node", "metrics", id); !strings.Contains(out, "# TYPE cairn_node_memory_total_bytes gauge") || !strings.Contains(out, "go_goroutines ") {
		t.Errorf("node metrics printed %.500q, want the node's and the process's metrics", out)
	}

	// A profile of the process serving NodeManagement (this test's), in
	// pprof's format, written where --out says.
	profile := filepath.Join(t.TempDir(), "heap.pprof")
	if out := mustRun(t, dir, nodeEP, "node", "profile", id, "--kind", "heap", "--out", profile); !strings.Contains(out, "go tool pprof "+profile) {
		t.Errorf("node profile printed %q, want how to read %s", out, profile)
	}
	if b, err := os.ReadFile(profile); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("node profile wrote %.8q (%v), want a gzipped pprof profile", b, err)
	}
	if out, err := run(t, dir, nodeEP, "node", "profile", id, "--duration", "3m", "--out", profile); err == nil || !strings.Contains(err.Error(), "1s to 2m") {
		t.Errorf("node profile --duration 3m = %q, %v: want refused", out, err)
	}

	mustRun(t, dir, nodeEP, "node", "reboot", "--firmware", id)
	select {
	case how := <-rebooted:
		if how != "firmware" {
			t.Errorf("node reboot --firmware rebooted by %s, want through the firmware", how)
		}
	case <-time.After(30 * time.Second):
		t.Error("node reboot --firmware: the node was not rebooted")
	}
	if _, err := run(t, dir, nodeEP, "node", "poweroff", id); err == nil {
		t.Error("node poweroff after a reboot succeeded, want the node to refuse")
	}
}

// TestNodeManagementChecksWhoAnswers points per-node commands of node A
// at the management port of node B, another node of the same cluster:
// cairnctl refuses B's certificate, names both nodes, and sends B
// nothing.
func TestNodeManagementChecksWhoAnswers(t *testing.T) {
	dir, s := bootstrapped(t)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")

	nodeA, nodeB := s.ca.Node(t), s.ca.Node(t)
	ltA, ltB := logtree.New(), logtree.New()
	ltA.LeveledFor("root").Info("this is node A")
	ltB.LeveledFor("root").Info("this is node B")
	var rebootsB atomic.Int32
	addrA := serveNodeManagement(t, nodeA, nodemanagement.Config{LogTree: ltA, Reboot: func() {}, Poweroff: func() {}})
	addrB := serveNodeManagement(t, nodeB, nodemanagement.Config{LogTree: ltB, Reboot: func() { rebootsB.Add(1) }, Poweroff: func() {}})
	a, b := nodeA.ID(), nodeB.ID()

	wrongEP := "--node-endpoint=" + a + "=" + addrB
	want := fmt.Sprintf("endpoint %s answered as %s, not %s: check --node-endpoint", addrB, b, a)
	for _, args := range [][]string{
		{wrongEP, "logs", a},
		{wrongEP, "node", "reboot", a},
	} {
		out, err := run(t, dir, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cairnctl %s = %v, want an error containing %q", strings.Join(args, " "), err, want)
		}
		if out != "" {
			t.Errorf("cairnctl %s printed %q, want nothing", strings.Join(args, " "), out)
		}
	}
	if n := rebootsB.Load(); n != 0 {
		t.Errorf("node B was rebooted %d times by calls meant for node A, want none", n)
	}

	// A stored endpoint of the wrong node says where to look.
	mustRun(t, dir, "config", "set-node-endpoint", a+"="+addrB)
	if _, err := run(t, dir, "logs", a); err == nil || !strings.Contains(err.Error(), "answered as "+b+", not "+a+": check the node endpoint stored in "+dir) {
		t.Errorf("logs with a stored endpoint of another node = %v, want it to point at the stored endpoint", err)
	}

	if out := mustRun(t, dir, "--node-endpoint="+a+"="+addrA, "logs", a); !strings.Contains(out, "this is node A") {
		t.Errorf("logs of node A at its own endpoint printed %q, want node A's logs", out)
	}
}

// serveNodeManagement serves the NodeManagement service of cfg with the
// identity node on a loopback port until the test ends, and returns the
// port's address.
func serveNodeManagement(t *testing.T, node *identity.Node, cfg nodemanagement.Config) string {
	t.Helper()
	srv := rpc.NewServer(node)
	api.RegisterNodeManagementServer(srv, nodemanagement.New(cfg))
	return serve(t, srv)
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

// TestNodeUpdate stages a release on a node with node update, then reads
// the slots back with node slots; a release the cluster does not trust is
// refused with the reason.
func TestNodeUpdate(t *testing.T) {
	dir, s := bootstrapped(t)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")
	n := updatetest.New(t)
	node := s.ca.Node(t)
	addr := serveNodeManagement(t, node, nodemanagement.Config{Installer: n.Installer})
	id := node.ID()
	nodeEP := "--node-endpoint=" + id + "=" + addr
	const version = "0.0.0-20260601000000-0123456789ab"
	r := n.Push(t, version)

	n.Trust(false)
	if _, err := run(t, dir, nodeEP, "node", "update", id, "--image", r.Reference, "--stage"); err == nil || !strings.Contains(err.Error(), "trusts no release key") {
		t.Errorf("node update of an untrusted release: %v, want the node's refusal", err)
	}
	n.Trust(true)
	out := mustRun(t, dir, nodeEP, "node", "update", id, "--image", r.Reference, "--stage")
	if want := "Node " + id + " staged release " + version + " in system slot b"; !strings.Contains(out, want) {
		t.Errorf("node update printed %q, want %q", out, want)
	}
	out = mustRun(t, dir, nodeEP, "node", "slots", id)
	for _, want := range []string{"a     yes      good    " + updatetest.Running, "b              staged  " + version} {
		if !strings.Contains(out, want) {
			t.Errorf("node slots printed\n%s\nwant a line %q", out, want)
		}
	}
}
