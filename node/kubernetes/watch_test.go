package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
