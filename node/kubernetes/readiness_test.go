package kubernetes

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// readyzServer plays an apiserver's /readyz: not ready until readyAfter
// questions were asked, then ready; it records when each question came.
type readyzServer struct {
	readyAfter int
	mu         sync.Mutex
	asked      []time.Time
}

func (s *readyzServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/readyz" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.asked = append(s.asked, time.Now())
	n := len(s.asked)
	s.mu.Unlock()
	if n <= s.readyAfter {
		http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed: reason withheld", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("ok"))
}

func (s *readyzServer) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.asked...)
}

// waitAll runs waiters components waiting through r for the apiserver of
// srv, and returns once all have seen it ready.
func waitAll(t *testing.T, srv *httptest.Server, r *Readiness, waiters int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, waiters)
	for range waiters {
		cl := &apiClient{server: srv.URL, http: srv.Client()}
		go func() { errs <- cl.waitReady(ctx, r, t.Logf) }()
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("a component waiting for the apiserver: %v", err)
		}
	}
}

// TestReadinessSharesQuestions: six components of a node waiting for an
// apiserver that becomes ready at its third answer all see it ready, and
// through the node's Readiness it is asked once at a time, each question
// at least readyInterval after the one before; each asking alone, it is
// asked by all six at once.
func TestReadinessSharesQuestions(t *testing.T) {
	const waiters = 6
	shared := &readyzServer{readyAfter: 2}
	srv := httptest.NewServer(shared)
	defer srv.Close()
	waitAll(t, srv, NewReadiness(), waiters)
	asked := shared.times()
	for i := 1; i < len(asked); i++ {
		if gap := asked[i].Sub(asked[i-1]); gap < readyInterval {
			t.Errorf("question %d came %v after the one before, want at least %v", i+1, gap, readyInterval)
		}
	}

	alone := &readyzServer{readyAfter: 2}
	srv2 := httptest.NewServer(alone)
	defer srv2.Close()
	waitAll(t, srv2, nil, waiters)
	if n := len(alone.times()); n < waiters+2 || n <= len(asked) {
		t.Errorf("asked %d times by %d components asking alone (%d through a shared Readiness), want at least %d", n, waiters, len(asked), waiters+2)
	}
}

// TestReadinessAbandonedQuestion: a component whose context ends while it
// asks does not hand its context's error to the component that waited
// for its answer: that one asks again and learns the apiserver is ready.
func TestReadinessAbandonedQuestion(t *testing.T) {
	var questions atomic.Int32
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if questions.Add(1) == 1 {
			// The first question is never answered: its asker gives up.
			close(arrived)
			<-r.Context().Done()
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	// Deferred after Close, it runs before: Close waits for the handler
	// that waits for this.
	first, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	r := NewReadiness()
	cl := &apiClient{server: srv.URL, http: srv.Client()}

	firstErr := make(chan error, 1)
	go func() { firstErr <- r.ask(first, cl) }()
	<-arrived

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secondErr := make(chan error, 1)
	go func() { secondErr <- r.ask(ctx, cl) }()
	// The second waits for the first's answer, which never comes on its
	// own.
	select {
	case err := <-secondErr:
		t.Fatalf("the second asker answered before the first's question ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	giveUp()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the asker that gave up got %v, want its context's end", err)
	}
	if err := <-secondErr; err != nil {
		t.Errorf("the second asker got %v, want ready", err)
	}
	if n := questions.Load(); n != 2 {
		t.Errorf("the apiserver was asked %d times, want 2", n)
	}
}
