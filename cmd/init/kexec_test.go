package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// TestKexecPreload runs the preload in a supervision tree: it loads nothing
// until a reboot is prepared, loads once however often it is prepared,
// and the tree does not end while a load is under way, so that the core
// exits, and PID 1 kexecs, only once the image is in.
func TestKexecPreload(t *testing.T) {
	var loads atomic.Int32
	started, release := make(chan struct{}, 2), make(chan struct{})
	p := newKexecPreload(func(string, ...any) {})
	p.load = func() error {
		loads.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := supervisor.New(ctx, func(ctx context.Context) error {
		if err := supervisor.Run(ctx, "kexec", p.run); err != nil {
			return err
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}, supervisor.WithLogTree(logtree.New()))

	time.Sleep(100 * time.Millisecond)
	if n := loads.Load(); n != 0 {
		t.Fatalf("loaded %d times before a reboot was prepared, want 0", n)
	}
	p.prepare()
	p.prepare()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatalf("no load within a minute of prepare")
	}

	// The tree is stopped while the load runs: it waits for the load.
	cancel()
	ended := make(chan error, 1)
	go func() { ended <- s.Wait() }()
	select {
	case err := <-ended:
		t.Fatalf("the tree ended (%v) while the load was under way", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the tree did not end within a minute of the load")
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("loaded %d times, want 1", n)
	}
}

// TestKexecPreloadFailureIsNotFatal: a load that fails is logged, and the
// runnable is done, not restarted into a loop of loads.
func TestKexecPreloadFailureIsNotFatal(t *testing.T) {
	var loads atomic.Int32
	p := newKexecPreload(func(string, ...any) {})
	p.load = func() error {
		loads.Add(1)
		return errors.New("no image")
	}
	_, lt := supervisor.TestHarness(t, p.run)
	p.prepare()
	deadline := time.Now().Add(time.Minute)
	for loads.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for a restart, were there one
	if n := loads.Load(); n != 1 {
		t.Errorf("loaded %d times, want 1", n)
	}
	r, err := lt.Read("root", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	found := false
	for _, e := range r.Backlog {
		if e.Severity == logtree.WARNING && strings.Contains(e.Message, "no image") {
			found = true
		}
	}
	if !found {
		t.Errorf("the failed load was not logged as a warning; the log: %v", r.Backlog)
	}
}

func TestKexecLoaded(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    bool
	}{
		{"1\n", true},
		{"0\n", false},
		{"", false},
	} {
		f := filepath.Join(dir, "kexec_loaded")
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := kexecLoaded(f); got != tc.want {
			t.Errorf("kexecLoaded(%q) = %v, want %v", tc.content, got, tc.want)
		}
	}
	if kexecLoaded(filepath.Join(dir, "missing")) {
		t.Errorf("kexecLoaded(a missing file) = true, want false")
	}
}
