package etcd

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/fixture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// state is what the test decoder makes of a key: "-" when it is missing.
func decodeState(kv *mvccpb.KeyValue) (string, error) {
	if kv.Version == 0 {
		return string(kv.Key) + "=-", nil
	}
	if string(kv.Value) == "garbage" {
		return "", errors.New("garbage")
	}
	return string(kv.Key) + "=" + string(kv.Value), nil
}

func mustGet(t *testing.T, ctx context.Context, w event.Watcher[string], opts ...event.GetOption[string]) string {
	t.Helper()
	v, err := w.Get(ctx, opts...)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return v
}

func put(t *testing.T, ctx context.Context, cl *clientv3.Client, k, v string) int64 {
	t.Helper()
	resp, err := cl.Put(ctx, k, v)
	if err != nil {
		t.Fatalf("Put(%q): %v", k, err)
	}
	return resp.Header.Revision
}

func TestKey(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	w := NewValue(cl, "k", decodeState).Watch()
	defer w.Close()

	if got := mustGet(t, ctx, w); got != "k=-" {
		t.Errorf("Get of a missing key = %q, want k=-", got)
	}
	if _, err := w.Get(ctx, event.BacklogOnly[string]()); !errors.Is(err, event.ErrBacklogDone) {
		t.Errorf("Get(BacklogOnly) with nothing new = %v, want ErrBacklogDone", err)
	}
	put(t, ctx, cl, "other", "x")
	put(t, ctx, cl, "k", "1")
	if got := mustGet(t, ctx, w); got != "k=1" {
		t.Errorf("Get after Put = %q, want k=1", got)
	}
	// Several updates while nobody looks: only the newest is returned.
	put(t, ctx, cl, "k", "2")
	put(t, ctx, cl, "k", "3")
	if got := mustGet(t, ctx, w, event.BacklogOnly[string]()); got != "k=3" {
		t.Errorf("Get(BacklogOnly) after two Puts = %q, want k=3", got)
	}
	if _, err := cl.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, ctx, w); got != "k=-" {
		t.Errorf("Get after Delete = %q, want k=-", got)
	}

	// A blocked Get wakes up for a later Put, and Filter skips values.
	done := make(chan string)
	go func() {
		v, _ := w.Get(ctx, event.Filter(func(s string) bool { return s == "k=5" }))
		done <- v
	}()
	time.Sleep(100 * time.Millisecond)
	put(t, ctx, cl, "k", "4")
	time.Sleep(100 * time.Millisecond)
	put(t, ctx, cl, "k", "5")
	if got := <-done; got != "k=5" {
		t.Errorf("filtered Get = %q, want k=5", got)
	}

	// Decoder errors come out of Get.
	put(t, ctx, cl, "k", "garbage")
	if _, err := w.Get(ctx); err == nil {
		t.Errorf("Get of an undecodable value succeeded")
	}
}

func TestRange(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	put(t, ctx, cl, "a/1", "x")
	put(t, ctx, cl, "a/2", "y")
	put(t, ctx, cl, "b/1", "not in range")
	w := NewRange(cl, "a/", clientv3.GetPrefixRangeEnd("a/"), decodeState).Watch()
	defer w.Close()

	var backlog []string
	for {
		v, err := w.Get(ctx, event.BacklogOnly[string]())
		if errors.Is(err, event.ErrBacklogDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		backlog = append(backlog, v)
	}
	if diff := cmp.Diff([]string{"a/1=x", "a/2=y"}, backlog); diff != "" {
		t.Errorf("backlog (-want +got):\n%s", diff)
	}

	// Every update of every key, in order, none skipped.
	put(t, ctx, cl, "a/1", "x2")
	put(t, ctx, cl, "b/1", "still not in range")
	put(t, ctx, cl, "a/3", "z")
	put(t, ctx, cl, "a/1", "x3")
	if _, err := cl.Delete(ctx, "a/2"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		got = append(got, mustGet(t, ctx, w))
	}
	if diff := cmp.Diff([]string{"a/1=x2", "a/3=z", "a/1=x3", "a/2=-"}, got); diff != "" {
		t.Errorf("updates (-want +got):\n%s", diff)
	}
}

// TestCompaction makes the revision a watcher would resume from vanish,
// and checks that it catches up with the current state instead.
func TestCompaction(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	put(t, ctx, cl, "r/gone", "1")
	put(t, ctx, cl, "r/stays", "1")
	put(t, ctx, cl, "k", "0")
	key := NewValue(cl, "k", decodeState).Watch()
	defer key.Close()
	rng := NewRange(cl, "r/", clientv3.GetPrefixRangeEnd("r/"), decodeState).Watch()
	defer rng.Close()
	mustGet(t, ctx, key)
	for range 2 {
		mustGet(t, ctx, rng)
	}
	// Nobody watches yet (watches start on the first blocking Get), so
	// compacting past these puts hides them from any watch.
	for i := range 5 {
		put(t, ctx, cl, "k", strconv.Itoa(i+1))
	}
	put(t, ctx, cl, "r/new", "1")
	if _, err := cl.Delete(ctx, "r/gone"); err != nil {
		t.Fatal(err)
	}
	rev := put(t, ctx, cl, "unrelated", "x")
	if _, err := cl.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if got := mustGet(t, ctx, key); got != "k=5" {
		t.Errorf("key after compaction = %q, want k=5", got)
	}
	var got []string
	for range 2 {
		got = append(got, mustGet(t, ctx, rng))
	}
	if diff := cmp.Diff([]string{"r/new=1", "r/gone=-"}, got); diff != "" {
		t.Errorf("range after compaction (-want +got):\n%s", diff)
	}
}

func TestCloseAndCancel(t *testing.T) {
	ctx := fixture.Context(t)
	cl := etcdtest.StartEtcd(t)
	for _, mk := range []func() event.Watcher[string]{
		func() event.Watcher[string] { return NewValue(cl, "k", decodeState).Watch() },
		func() event.Watcher[string] { return NewRange(cl, "a", "b", decodeState).Watch() },
	} {
		w := mk()
		if _, err := w.Get(ctx, event.BacklogOnly[string]()); err != nil && !errors.Is(err, event.ErrBacklogDone) {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := w.Get(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get with an expiring context = %v, want DeadlineExceeded", err)
		}
		errc := make(chan error)
		go func() {
			_, err := w.Get(ctx)
			errc <- err
		}()
		time.Sleep(50 * time.Millisecond)
		w.Close()
		if err := <-errc; !errors.Is(err, event.ErrWatcherClosed) {
			t.Errorf("Get blocked during Close = %v, want ErrWatcherClosed", err)
		}
		if _, err := w.Get(ctx); !errors.Is(err, event.ErrWatcherClosed) {
			t.Errorf("Get after Close = %v, want ErrWatcherClosed", err)
		}
	}
}

func TestSetPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Set did not panic")
		}
	}()
	NewValue[string](nil, "k", decodeState).Set("x")
}

// TestReconnect stops etcd under a blocked Get and starts it again: the
// Get returns the update made after the restart.
func TestReconnect(t *testing.T) {
	ctx := fixture.Context(t)
	srv := etcdtest.NewServer(t)
	srv.Start(t)
	cl := etcdtest.NewClient(t, srv.Endpoint())
	put(t, ctx, cl, "k", "before")
	w := NewValue(cl, "k", decodeState).Watch()
	defer w.Close()
	if got := mustGet(t, ctx, w); got != "k=before" {
		t.Fatalf("Get = %q, want k=before", got)
	}
	got := make(chan string)
	go func() {
		v, err := w.Get(ctx)
		if err != nil {
			v = err.Error()
		}
		got <- v
	}()
	time.Sleep(100 * time.Millisecond)
	srv.Stop()
	time.Sleep(500 * time.Millisecond)
	srv.Start(t)
	put(t, ctx, cl, "k", "after")
	if v := <-got; v != "k=after" {
		t.Errorf("Get across a restart of etcd = %q, want k=after", v)
	}
}
