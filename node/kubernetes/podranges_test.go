package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestPodRangesConcurrentControllers records 24 nodes from 6 controllers
// at once, each in its own order, on a real etcd: every controller must
// get the same range for a node, and no two nodes the same range.
func TestPodRangesConcurrentControllers(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	const controllers, nodes = 6, 24
	got := make([][]netip.Prefix, controllers)
	var wg sync.WaitGroup
	errs := make(chan error, controllers)
	for c := range controllers {
		got[c] = make([]netip.Prefix, nodes)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := newRangeBook(etcd)
			for i := range nodes {
				n := (i + 5*c) % nodes // each controller's own order
				if c%2 == 1 {
					n = nodes - 1 - n
				}
				r, err := b.record(ctx, fmt.Sprintf("cairn-%02d", n), netip.Prefix{})
				if err != nil {
					errs <- err
					return
				}
				got[c][n] = r
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[netip.Prefix]int{}
	for n := range nodes {
		r := got[0][n]
		for c := 1; c < controllers; c++ {
			if got[c][n] != r {
				t.Errorf("node %d: controller 0 recorded %s, controller %d %s", n, r, c, got[c][n])
			}
		}
		if !podPrefix.Contains(r.Addr()) || r.Bits() != podMaskSize {
			t.Errorf("node %d got %s, not a /%d of %s", n, r, podMaskSize, podPrefix)
		}
		if other, dup := seen[r]; dup {
			t.Errorf("nodes %d and %d both got %s", other, n, r)
		}
		seen[r] = n
	}
	// Both ends of every record agree, and no range is held by nobody.
	rs, err := newRangeBook(etcd).read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.byRange) != nodes || len(rs.byNode) != nodes {
		t.Errorf("%d ranges recorded for %d nodes, want %d of each", len(rs.byRange), len(rs.byNode), nodes)
	}
	for n, h := range rs.byNode {
		if rs.byRange[h.r] != n {
			t.Errorf("node %s holds %s, recorded for %q", n, h.r, rs.byRange[h.r])
		}
	}
	// Nobody freed anything: the lowest ranges are the ones given.
	for i := range nodes {
		if r := netip.MustParsePrefix(fmt.Sprintf("10.192.%d.0/24", i)); !slices.Contains(got[0], r) {
			t.Errorf("range %s was skipped", r)
		}
	}
}

// TestPodRangesAdopt records the ranges Nodes have already, as the
// controller-manager gave them before Cairn did: new nodes get others, a
// record that disagrees with its Node yields to it, and a Node holding
// another node's range is refused.
func TestPodRangesAdopt(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	b := newRangeBook(etcd)
	old := netip.MustParsePrefix("10.192.0.0/24")
	if r, err := b.record(ctx, "cairn-old", old); err != nil || r != old {
		t.Fatalf("adopting %s: %s, %v", old, r, err)
	}
	fresh, err := b.record(ctx, "cairn-new", netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.MustParsePrefix("10.192.1.0/24"); fresh != want {
		t.Errorf("new node got %s, want %s (the first free)", fresh, want)
	}
	// cairn-new's Node got another range from elsewhere: the Node wins,
	// and the range recorded before is free again.
	moved := netip.MustParsePrefix("10.192.9.0/24")
	if r, err := b.record(ctx, "cairn-new", moved); err != nil || r != moved {
		t.Fatalf("adopting %s over %s: %s, %v", moved, fresh, r, err)
	}
	if r, err := b.record(ctx, "cairn-third", netip.Prefix{}); err != nil || r != fresh {
		t.Errorf("third node got %s, %v; want the freed %s", r, err, fresh)
	}
	if _, err := b.record(ctx, "cairn-clash", old); !errors.Is(err, errRangeTaken) {
		t.Errorf("a Node with cairn-old's range: %v, want %v", err, errRangeTaken)
	}
	rs, err := b.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[netip.Prefix]string{old: "cairn-old", moved: "cairn-new", fresh: "cairn-third"}
	if len(rs.byRange) != len(want) {
		t.Errorf("recorded %v, want %v", rs.byRange, want)
	}
	for r, n := range want {
		if rs.byRange[r] != n || rs.byNode[n].r != r {
			t.Errorf("range %s: recorded for %q (and %s for %s), want %s", r, rs.byRange[r], rs.byNode[n].r, n, n)
		}
	}
}

// TestPodRangesRelease frees a range only when its node is neither a
// worker nor listed, and only when its record is older than the list.
func TestPodRangesRelease(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	b := newRangeBook(etcd)
	before := currentRevision(t, etcd) + 1
	for _, n := range []string{"cairn-a", "cairn-b", "cairn-c", "cairn-d"} {
		if _, err := b.record(ctx, n, netip.Prefix{}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []ClusterNode{{ID: "cairn-a", Worker: true}, {ID: "cairn-b", Controller: true}, {ID: "cairn-c", Controller: true}}
	listed := map[string]bool{"cairn-b": true}
	// A list older than the records frees nothing.
	if err := b.releaseGone(ctx, before, listed, nodes, t.Logf); err != nil {
		t.Fatal(err)
	}
	if rs, _ := b.read(ctx); len(rs.byNode) != 4 {
		t.Fatalf("a list from before the records freed some: %v", rs.byNode)
	}
	// cairn-a is a worker whose kubelet has not registered, cairn-b has
	// its Node: both keep their ranges. cairn-c lost the role and its
	// Node, cairn-d left the cluster: theirs are freed.
	if err := b.releaseGone(ctx, currentRevision(t, etcd)+1, listed, nodes, t.Logf); err != nil {
		t.Fatal(err)
	}
	rs, err := b.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(mapKeys(rs.byNode)); !slices.Equal(got, []string{"cairn-a", "cairn-b"}) {
		t.Errorf("after freeing, recorded for %v, want cairn-a and cairn-b", got)
	}
	if len(rs.byRange) != 2 {
		t.Errorf("range keys left: %v", rs.byRange)
	}
	// The lowest freed range is given again.
	if r, err := b.record(ctx, "cairn-e", netip.Prefix{}); err != nil || r != netip.MustParsePrefix("10.192.2.0/24") {
		t.Errorf("next node got %s, %v; want cairn-c's 10.192.2.0/24", r, err)
	}
}

func currentRevision(t *testing.T, etcd *clientv3.Client) int64 {
	t.Helper()
	resp, err := etcd.Get(fixture.Context(t), "any")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// rangesServer is an apiserver's Node list and watch, and records the
// patches of Nodes' specs.
type rangesServer struct {
	mu      sync.Mutex
	nodes   []map[string]any
	patches map[string][]string
	// events, when not nil, are the watch's events, each sent as it
	// comes.
	events chan map[string]any
}

func (s *rangesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-s.events:
				_ = json.NewEncoder(w).Encode(ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.Method == http.MethodGet:
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"resourceVersion": "1"}, "items": s.nodes})
	case r.Method == http.MethodPatch:
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.patches[r.URL.Path] = append(s.patches[r.URL.Path], string(body))
		fmt.Fprint(w, `{}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// TestRunPodRanges runs two controllers' pod range followers against one
// cluster: each Cairn Node without a range gets the same one from both,
// a Node with a range and a Node that is not Cairn's are not touched.
func TestRunPodRanges(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	node := func(name, cidr string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"podCIDR": cidr}}
	}
	srv := &rangesServer{
		nodes:   []map[string]any{node("cairn-a", ""), node("cairn-b", "10.192.0.0/24"), node("cairn-c", ""), node("laptop", "")},
		patches: map[string][]string{},
	}
	ts := httptest.NewServer(srv)
	// Closed after the followers stop, which end their watches.
	t.Cleanup(ts.Close)
	for range 2 {
		cl := &apiClient{server: ts.URL, http: ts.Client()}
		supervisortest.Harness(t, func(ctx context.Context) error { return runPodRanges(ctx, cl, newRangeBook(etcd)) })
	}
	want := map[string]string{
		"/api/v1/nodes/cairn-a": `{"spec":{"podCIDR":"10.192.1.0/24","podCIDRs":["10.192.1.0/24"]}}`,
		"/api/v1/nodes/cairn-c": `{"spec":{"podCIDR":"10.192.2.0/24","podCIDRs":["10.192.2.0/24"]}}`,
	}
	deadline := time.Now().Add(time.Minute)
	for {
		srv.mu.Lock()
		done := len(srv.patches["/api/v1/nodes/cairn-a"]) == 2 && len(srv.patches["/api/v1/nodes/cairn-c"]) == 2
		got := fmt.Sprint(srv.patches)
		srv.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("patches after a minute: %s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for path, ps := range srv.patches {
		for _, p := range ps {
			if p != want[path] {
				t.Errorf("PATCH %s %s, want %s", path, p, want[path])
			}
		}
	}
	b := newRangeBook(etcd)
	if rs, err := b.read(fixture.Context(t)); err != nil || rs.byNode["cairn-b"].r != netip.MustParsePrefix("10.192.0.0/24") {
		t.Errorf("cairn-b's existing range not recorded: %v, %v", rs.byNode, err)
	}
}

// TestRunPodRangesStaleEvent gives a Node its range once, though an event
// sent before the patch's own shows it without one, and again to a Node
// made anew under the same name.
func TestRunPodRangesStaleEvent(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	node := func(name, uid string) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name, "uid": uid}, "spec": map[string]any{}}
	}
	srv := &rangesServer{
		nodes:   []map[string]any{node("cairn-a", "a1")},
		patches: map[string][]string{},
		events:  make(chan map[string]any),
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	supervisortest.Harness(t, func(ctx context.Context) error { return runPodRanges(ctx, cl, newRangeBook(etcd)) })
	patched := func(path string, n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			srv.mu.Lock()
			got := len(srv.patches[path])
			srv.mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s patched %d times after a minute, want %d", path, got, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	send := func(typ string, obj map[string]any) {
		t.Helper()
		select {
		case srv.events <- map[string]any{"type": typ, "object": obj}:
		case <-time.After(time.Minute):
			t.Fatalf("the follower did not watch for a minute")
		}
	}
	patched("/api/v1/nodes/cairn-a", 1)
	// The kubelet's status update, sent before the patch's own event.
	send("MODIFIED", node("cairn-a", "a1"))
	// The Node deleted and registered again.
	send("DELETED", node("cairn-a", "a1"))
	send("ADDED", node("cairn-a", "a2"))
	patched("/api/v1/nodes/cairn-a", 2)
	// Events are applied in order: once cairn-z has its range, every
	// event before it was seen.
	send("ADDED", node("cairn-z", "z1"))
	patched("/api/v1/nodes/cairn-z", 1)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	want := `{"spec":{"podCIDR":"10.192.0.0/24","podCIDRs":["10.192.0.0/24"]}}`
	if got := srv.patches["/api/v1/nodes/cairn-a"]; len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("cairn-a's patches %q, want %s twice: once for each Node of that name", got, want)
	}
}

// TestPodRangesExhausted gives every range of a small pool, in order, and
// then refuses the next node.
func TestPodRangesExhausted(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	b := &rangeBook{kv: etcd, pool: netip.MustParsePrefix("10.192.0.0/22"), bits: podMaskSize}
	for i := range 4 {
		want := netip.MustParsePrefix(fmt.Sprintf("10.192.%d.0/24", i))
		if r, err := b.record(ctx, fmt.Sprintf("cairn-%d", i), netip.Prefix{}); err != nil || r != want {
			t.Fatalf("node %d got %s, %v; want %s", i, r, err, want)
		}
	}
	if r, err := b.record(ctx, "cairn-4", netip.Prefix{}); err == nil {
		t.Errorf("a fifth node got %s from a pool of four ranges", r)
	}
}
