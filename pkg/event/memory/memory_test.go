package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/event"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// getAsync runs w.Get in a goroutine of its own and returns a channel that
// yields its result once.
func getAsync[T any](ctx context.Context, w event.Watcher[T], opts ...event.GetOption[T]) <-chan result[T] {
	c := make(chan result[T], 1)
	go func() {
		v, err := w.Get(ctx, opts...)
		c <- result[T]{v, err}
	}()
	return c
}

type result[T any] struct {
	value T
	err   error
}

func TestZeroValue(t *testing.T) {
	var v Value[string]
	w := v.Watch()
	defer w.Close()

	if got, err := w.Get(context.Background(), event.BacklogOnly[string]()); !errors.Is(err, event.ErrBacklogDone) {
		t.Fatalf("Get on an unset Value = %q, %v, want %v", got, err, event.ErrBacklogDone)
	}
	v.Set("hello")
	if got, err := w.Get(context.Background()); err != nil || got != "hello" {
		t.Fatalf("Get = %q, %v, want %q", got, err, "hello")
	}
}

func TestGetBlocksUntilSet(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()

	res := getAsync(context.Background(), w)
	select {
	case r := <-res:
		t.Fatalf("Get returned %d, %v before any Set", r.value, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	v.Set(42)
	if r := <-res; r.err != nil || r.value != 42 {
		t.Fatalf("Get = %d, %v, want 42", r.value, r.err)
	}
}

func TestLateWatcherGetsCurrentValue(t *testing.T) {
	var v Value[int]
	v.Set(1)
	v.Set(2)
	w := v.Watch()
	defer w.Close()
	if got, err := w.Get(context.Background()); err != nil || got != 2 {
		t.Fatalf("Get = %d, %v, want 2", got, err)
	}
}

// TestEverySetIsNew checks that a watcher never sees one Set twice, but does
// see a second Set of an equal value.
func TestEverySetIsNew(t *testing.T) {
	ctx := context.Background()
	var v Value[int]
	w := v.Watch()
	defer w.Close()

	v.Set(7)
	if got, err := w.Get(ctx); err != nil || got != 7 {
		t.Fatalf("Get = %d, %v, want 7", got, err)
	}
	if got, err := w.Get(ctx, event.BacklogOnly[int]()); !errors.Is(err, event.ErrBacklogDone) {
		t.Fatalf("second Get of one Set = %d, %v, want %v", got, err, event.ErrBacklogDone)
	}
	v.Set(7)
	if got, err := w.Get(ctx, event.BacklogOnly[int]()); err != nil || got != 7 {
		t.Fatalf("Get after a repeated Set = %d, %v, want 7", got, err)
	}
}

func TestWatchersAreIndependent(t *testing.T) {
	ctx := context.Background()
	var v Value[int]
	a, b := v.Watch(), v.Watch()
	defer a.Close()
	defer b.Close()

	v.Set(1)
	if got, err := a.Get(ctx); err != nil || got != 1 {
		t.Fatalf("a.Get = %d, %v, want 1", got, err)
	}
	v.Set(2)
	for name, w := range map[string]event.Watcher[int]{"a": a, "b": b} {
		if got, err := w.Get(ctx); err != nil || got != 2 {
			t.Errorf("%s.Get = %d, %v, want 2", name, got, err)
		}
	}
}

// TestManyWatchers has many goroutines follow one writer. Each must see
// strictly increasing values and, in the end, the final one.
func TestManyWatchers(t *testing.T) {
	const (
		watchers = 100
		sets     = 10000
	)
	var v Value[int]
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	started := make(chan struct{}, watchers)
	for i := range watchers {
		wg.Go(func() {
			w := v.Watch()
			defer w.Close()
			started <- struct{}{}
			last := 0
			for last != sets {
				got, err := w.Get(context.Background())
				if err != nil {
					errs <- fmt.Errorf("watcher %d: Get: %w", i, err)
					return
				}
				if got <= last {
					errs <- fmt.Errorf("watcher %d: Get = %d after %d, want an increasing sequence", i, got, last)
					return
				}
				last = got
			}
		})
	}
	// Let some watchers start before the writer and others during it.
	for range watchers / 2 {
		<-started
	}
	for i := 1; i <= sets; i++ {
		v.Set(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConcurrentGetsOnOneWatcher shares one watcher between goroutines: no
// two Gets may return the same Set.
func TestConcurrentGetsOnOneWatcher(t *testing.T) {
	const (
		readers = 8
		sets    = 5000
	)
	ctx, cancel := context.WithCancel(context.Background())
	var v Value[int]
	w := v.Watch()
	defer w.Close()

	var mu sync.Mutex
	seen := make(map[int]int)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for {
				got, err := w.Get(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				seen[got]++
				mu.Unlock()
			}
		})
	}
	for i := 1; i <= sets; i++ {
		v.Set(i)
	}
	// One more Get must see the last value unless a reader took it already.
	last, err := w.Get(ctx, event.BacklogOnly[int]())
	cancel()
	wg.Wait()
	if err == nil {
		seen[last]++
	}
	if seen[sets] != 1 {
		t.Errorf("last value %d returned %d times, want once", sets, seen[sets])
	}
	for val, n := range seen {
		if n != 1 {
			t.Errorf("value %d returned %d times, want once", val, n)
		}
	}
}

// TestSlowWatcher parks a watcher while the writer Sets many values: the
// writer must finish without waiting for it, and the watcher then gets only
// the newest value.
func TestSlowWatcher(t *testing.T) {
	const sets = 100000
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	v.Set(0)
	if _, err := w.Get(context.Background()); err != nil {
		t.Fatalf("Get: %v", err)
	}

	// A second watcher stays blocked inside Get during the whole run.
	parked := v.Watch()
	defer parked.Close()
	if _, err := parked.Get(context.Background()); err != nil {
		t.Fatalf("Get: %v", err)
	}
	parkedRes := getAsync(context.Background(), parked, event.Filter(func(int) bool { return false }))

	start := time.Now()
	for i := 1; i <= sets; i++ {
		v.Set(i)
	}
	t.Logf("%d Sets with two idle watchers took %v", sets, time.Since(start))

	if got, err := w.Get(context.Background()); err != nil || got != sets {
		t.Fatalf("Get = %d, %v, want %d", got, err, sets)
	}
	if got, err := w.Get(context.Background(), event.BacklogOnly[int]()); !errors.Is(err, event.ErrBacklogDone) {
		t.Fatalf("Get = %d, %v, want %v (intermediate values must be skipped)", got, err, event.ErrBacklogDone)
	}
	parked.Close()
	if r := <-parkedRes; !errors.Is(r.err, event.ErrWatcherClosed) {
		t.Fatalf("Get on the parked watcher = %d, %v, want %v", r.value, r.err, event.ErrWatcherClosed)
	}
}

// TestGetOptions checks what one Get returns, without blocking, after a
// series of Sets.
func TestGetOptions(t *testing.T) {
	even := event.Filter(func(v int) bool { return v%2 == 0 })
	positive := event.Filter(func(v int) bool { return v > 0 })
	backlog := event.BacklogOnly[int]()
	with := func(o ...event.GetOption[int]) []event.GetOption[int] { return o }
	done := event.ErrBacklogDone
	for _, tc := range []struct {
		name     string
		sets     []int
		seenLast bool // the watcher has already returned the last Set
		opts     []event.GetOption[int]
		want     int
		wantErr  error
	}{
		{name: "newest value", sets: []int{1, 2, 3}, opts: with(backlog), want: 3},
		{name: "no value yet", opts: with(backlog), wantErr: done},
		{name: "already seen", sets: []int{1}, seenLast: true, opts: with(backlog), wantErr: done},
		{name: "filter accepts", sets: []int{1, 4}, opts: with(even, backlog), want: 4},
		{name: "filter rejects", sets: []int{2, 3}, opts: with(even, backlog), wantErr: done},
		{name: "both filters accept", sets: []int{-2, 6}, opts: with(even, positive, backlog), want: 6},
		{name: "one of two filters rejects", sets: []int{6, -2}, opts: with(even, positive, backlog), wantErr: done},
		{name: "nil filter and option", sets: []int{5}, opts: with(event.Filter[int](nil), nil, backlog), want: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Value[int]
			w := v.Watch()
			defer w.Close()
			for _, s := range tc.sets {
				v.Set(s)
			}
			if tc.seenLast {
				if _, err := w.Get(context.Background()); err != nil {
					t.Fatalf("Get: %v", err)
				}
			}
			got, err := w.Get(context.Background(), tc.opts...)
			if !errors.Is(err, tc.wantErr) || (err == nil && got != tc.want) {
				t.Errorf("Get after Sets %v = %d, %v, want %d, %v", tc.sets, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestFilterBlocks checks that Get with a Filter keeps waiting while new
// values are rejected.
func TestFilterBlocks(t *testing.T) {
	var v Value[int]
	w := v.Watch()
	defer w.Close()

	res := getAsync(context.Background(), w, event.Filter(func(v int) bool { return v >= 5 }))
	for i := 1; i <= 4; i++ {
		v.Set(i)
	}
	select {
	case r := <-res:
		t.Fatalf("Get returned %d, %v before an acceptable value was Set", r.value, r.err)
	default:
	}
	v.Set(5)
	if r := <-res; r.err != nil || r.value != 5 {
		t.Fatalf("Get = %d, %v, want 5", r.value, r.err)
	}
}

func TestClose(t *testing.T) {
	var v Value[int]
	w := v.Watch()

	res := getAsync(context.Background(), w)
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := <-res; !errors.Is(r.err, event.ErrWatcherClosed) {
		t.Fatalf("blocked Get after Close = %d, %v, want %v", r.value, r.err, event.ErrWatcherClosed)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	v.Set(1)
	if got, err := w.Get(context.Background()); !errors.Is(err, event.ErrWatcherClosed) {
		t.Fatalf("Get on a closed watcher = %d, %v, want %v", got, err, event.ErrWatcherClosed)
	}
	// Other watchers are unaffected.
	other := v.Watch()
	defer other.Close()
	if got, err := other.Get(context.Background()); err != nil || got != 1 {
		t.Fatalf("Get on another watcher = %d, %v, want 1", got, err)
	}
}

func TestContextDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{
			name: "canceled",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(10*time.Millisecond, cancel)
				return ctx, cancel
			},
			want: context.Canceled,
		},
		{
			name: "deadline",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 10*time.Millisecond)
			},
			want: context.DeadlineExceeded,
		},
		{
			name: "canceled before Get, with a value waiting",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			want: context.Canceled,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v Value[int]
			w := v.Watch()
			defer w.Close()
			ctx, cancel := tc.ctx()
			defer cancel()
			if ctx.Err() != nil {
				v.Set(1)
			}
			got, err := w.Get(ctx)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Get = %d, %v, want an error wrapping %v", got, err, tc.want)
			}
			// The watcher is still usable with a live context.
			v.Set(2)
			if got, err := w.Get(context.Background()); err != nil || got != 2 {
				t.Fatalf("Get after the failed one = %d, %v, want 2", got, err)
			}
		})
	}
}
