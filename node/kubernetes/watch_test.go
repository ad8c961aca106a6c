package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/supervisor"
)

// watchServer plays an apiserver's list and watch of Services: the first
// list, a watch with each kind of event, a watch whose version is gone, a
// second list, and then a watch that stays open.
type watchServer struct {
	mu    sync.Mutex
	lists int
	asked []string
}

func (s *watchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	q := r.URL.Query()
	s.asked = append(s.asked, "watch="+q.Get("watch")+" rv="+q.Get("resourceVersion"))
	lists := s.lists
	if q.Get("watch") == "" {
		s.lists++
	}
	s.mu.Unlock()
	obj := func(name, rv string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","resourceVersion":%q},"spec":{"clusterIP":"10.96.0.%d"}}`, name, rv, len(name))
	}
	switch {
	case q.Get("watch") == "" && lists == 0:
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"10"},"items":[%s]}`, obj("a", "5"))
	case q.Get("watch") == "":
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"20"},"items":[%s,%s]}`, obj("a", "5"), obj("ccc", "19"))
	case q.Get("resourceVersion") == "10":
		w.Header().Set("Content-Type", "application/json")
		for _, ev := range []string{
			`{"type":"ADDED","object":` + obj("bb", "11") + `}`,
			`{"type":"MODIFIED","object":` + obj("a", "12") + `}`,
			`{"type":"DELETED","object":` + obj("bb", "13") + `}`,
			`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"14"}}}`,
		} {
			fmt.Fprintln(w, ev)
			w.(http.Flusher).Flush()
		}
	case q.Get("resourceVersion") == "14":
		fmt.Fprintln(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version: 14"}}`)
	default:
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

func TestFollow(t *testing.T) {
	srv := &watchServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: &http.Client{Timeout: time.Second}}
	ctx, cancel := context.WithCancel(fixture.Context(t))
	defer cancel()
	// Once the last watch is open, it outlives the client's timeout
	// before the test ends it.
	go func() {
		for ctx.Err() == nil {
			srv.mu.Lock()
			open := slices.Contains(srv.asked, "watch=true rv=20")
			srv.mu.Unlock()
			if open {
				time.Sleep(1500 * time.Millisecond)
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var seen []string
	err := follow(ctx, cl, "/api/v1/services", func(m map[string]service) error {
		var keys []string
		for k, s := range m {
			keys = append(keys, k+"="+s.Spec.ClusterIP+"@"+s.Metadata.ResourceVersion)
		}
		slices.Sort(keys)
		seen = append(seen, strings.Join(keys, ","))
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("follow = %v, want context.Canceled", err)
	}
	want := []string{
		"default/a=10.96.0.1@5",
		"default/a=10.96.0.1@5,default/bb=10.96.0.2@11",
		"default/a=10.96.0.1@12,default/bb=10.96.0.2@11",
		"default/a=10.96.0.1@12",
		"default/a=10.96.0.1@5,default/ccc=10.96.0.3@19",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("follow saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	wantAsked := []string{"watch= rv=", "watch=true rv=10", "watch=true rv=14", "watch= rv=", "watch=true rv=20"}
	if !slices.Equal(srv.asked, wantAsked) {
		t.Errorf("requests %q, want %q (the watch must outlive the client's timeout)", srv.asked, wantAsked)
	}
}

func TestFollowStopsOnError(t *testing.T) {
	ts := httptest.NewServer(&watchServer{})
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	boom := errors.New("boom")
	err := follow(fixture.Context(t), cl, "/api/v1/services", func(map[string]service) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("follow = %v, want the callback's error", err)
	}
}

// TestHealthyAfterKeepsBackoff checks that a follower whose apiserver
// fails is restarted with a growing delay: it must not signal Healthy,
// which resets the delay, before its first list succeeds. Restarted every
// 100 ms, it would start about 16 times in 1.6 s; with the delay doubling
// from 100 ms, it starts about 5 times.
func TestHealthyAfterKeepsBackoff(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"message":"the apiserver is away"}`)
	}))
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	var mu sync.Mutex
	restarts := 0
	ctx, cancel := context.WithCancel(fixture.Context(t))
	defer cancel()
	sup := supervisor.New(ctx, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "follower", func(ctx context.Context) error {
			return follow(ctx, cl, "/api/v1/services", healthyAfter(ctx, func(map[string]service) error { return nil }))
		}); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, supervisor.WithRestartHook(func(dn string) {
		if strings.HasSuffix(dn, ".follower") {
			mu.Lock()
			restarts++
			mu.Unlock()
		}
	}))
	time.Sleep(1600 * time.Millisecond)
	cancel()
	sup.Wait()
	mu.Lock()
	defer mu.Unlock()
	if restarts < 1 || restarts > 6 {
		t.Errorf("the failing follower was restarted %d times in 1.6 s, want 1 to 6 (a doubling delay from 100 ms)", restarts)
	}
}

// nodesServer plays an apiserver's Nodes for followPodRanges. /readyz
// says ready only once told to (ready). Before that only Node "me" may
// be read, alone, and it has its pod range once told to (own). The list
// has "me" with its range and node "b" without one; the watch gives "b"
// its range once told to (give), then stays open.
type nodesServer struct {
	own, ready, give chan struct{}
	mu               sync.Mutex
	lists, reads     int
}

// closed reports whether c is closed.
func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (s *nodesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	node := func(name, cidr, rv string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q,"resourceVersion":%q},"spec":{"podCIDR":%q},`+
			`"status":{"addresses":[{"type":"InternalIP","address":"10.42.0.%d"}],"conditions":[{"type":"Ready","status":"True"}]}}`,
			name, rv, cidr, len(name))
	}
	switch {
	case r.URL.Path == "/readyz" && closed(s.ready):
		fmt.Fprint(w, "ok")
	case r.URL.Path == "/readyz":
		http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
	case r.URL.Path == "/api/v1/nodes/me":
		s.mu.Lock()
		s.reads++
		s.mu.Unlock()
		if closed(s.own) {
			fmt.Fprint(w, node("me", "10.192.0.0/24", "8"))
		} else {
			fmt.Fprint(w, node("me", "", "7"))
		}
	case !closed(s.ready):
		http.Error(w, "the apiserver is not ready", http.StatusForbidden)
	case r.URL.Query().Get("watch") == "":
		s.mu.Lock()
		s.lists++
		s.mu.Unlock()
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"10"},"items":[%s,%s]}`, node("me", "10.192.0.0/24", "8"), node("b", "", "9"))
	default:
		w.(http.Flusher).Flush()
		select {
		case <-s.give:
			fmt.Fprintln(w, `{"type":"MODIFIED","object":`+node("b", "10.192.1.0/24", "11")+`}`)
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		}
		<-r.Context().Done()
	}
}

// TestFollowPodRanges checks that the node's own pod range is applied as
// soon as its Node has one, before the apiserver is ready, and that the
// other ranges come from one list and a watch: a Node's new range is
// applied as soon as the watch reports it, and meanwhile the ranges
// already known are applied again without asking the apiserver.
func TestFollowPodRanges(t *testing.T) {
	srv := &nodesServer{own: make(chan struct{}), ready: make(chan struct{}), give: make(chan struct{})}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: &http.Client{Timeout: time.Second}}
	type call struct {
		at     time.Time
		ranges string
	}
	calls := make(chan call, 16)
	// Ready once every range is known.
	apply := func(ranges []podRange) (bool, error) {
		var s []string
		for _, r := range ranges {
			s = append(s, fmt.Sprintf("%s=%v", r.Node, r.Range))
		}
		calls <- call{time.Now(), strings.Join(s, ",")}
		return !slices.ContainsFunc(ranges, func(r podRange) bool { return !r.Range.IsValid() }), nil
	}
	ctx, cancel := context.WithCancel(fixture.Context(t))
	defer cancel()
	sup := supervisor.New(ctx, func(ctx context.Context) error {
		return followPodRanges(ctx, cl, nil, "me", time.Now().Add(time.Hour), apply)
	})
	defer sup.Wait()
	defer cancel()

	// Nothing is applied while the node's own Node has no range.
	select {
	case c := <-calls:
		t.Fatalf("apply got %s before the node had a range", c.ranges)
	case <-time.After(1500 * time.Millisecond):
	}
	close(srv.own)
	select {
	case c := <-calls:
		if want := "me=10.192.0.0/24"; c.ranges != want {
			t.Fatalf("apply before the apiserver is ready got %s, want %s", c.ranges, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node's own range was not applied within 10 s of its Node having it")
	}
	close(srv.ready)

	const before = "b=invalid Prefix,me=10.192.0.0/24"
	const after = "b=10.192.1.0/24,me=10.192.0.0/24"
	// Applied after the list, then again from what is known.
	for i := range 2 {
		select {
		case c := <-calls:
			if c.ranges != before {
				t.Fatalf("apply %d after the list got %s, want %s", i, c.ranges, before)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("apply was called %d times in 10 s after the list, want 2 before the Node changes", i)
		}
	}
	gave := time.Now()
	close(srv.give)
	select {
	case c := <-calls:
		if c.ranges != after {
			t.Errorf("apply after the watch's event got %s, want %s", c.ranges, after)
		}
		// The next pass from the known ranges is 2 s away.
		if d := c.at.Sub(gave); d > time.Second {
			t.Errorf("the watched change was applied after %s, want it at once", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watched change was not applied within 10 s")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.lists != 1 {
		t.Errorf("the Nodes were listed %d times, want once: the rest comes from the watch", srv.lists)
	}
	if srv.reads < 2 {
		t.Errorf("the node's own Node was read %d times, want it asked again until it had a range", srv.reads)
	}
}

// BenchmarkPodEvent measures what one event of the cluster's Pods costs
// a worker's core, whose NetworkPolicy controller follows every Pod:
// reading a Pod of 4.5 KB as the apiserver sends it (a Deployment's
// pause pod, its managed fields included) from a watch, and handing it
// to the controller's state with 100 Pods known.
func BenchmarkPodEvent(b *testing.B) {
	pod, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	event := fmt.Appendf(nil, `{"type":"MODIFIED","object":%s}`+"\n", bytes.TrimSpace(pod))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range b.N {
			w.Write(event)
		}
	}))
	defer ts.Close()
	cl := &apiClient{server: ts.URL, http: ts.Client()}
	objects := make(map[string]policyPod)
	for i := range 100 {
		objects[fmt.Sprintf("default/pod-%d", i)] = policyPod{}
	}
	st := newPolicyState()
	set := setInto(st, &st.pods)
	events := 0
	b.SetBytes(int64(len(event)))
	b.ResetTimer()
	_, err = watch(fixture.Context(b), cl, "/api/v1/pods", "1", objects, func(m map[string]policyPod) error {
		events++
		return set(m)
	})
	if err != nil {
		b.Fatal(err)
	}
	if events != b.N {
		b.Fatalf("the watch gave %d events, want %d", events, b.N)
	}
}
