// Package memory implements event.Value in process memory: the Value every
// part of a node uses to publish state to the other parts of the same node.
//
// The current state is one immutable snapshot behind an atomic pointer. A
// Set publishes a new snapshot and retires the old one, closing the old
// snapshot's wake channel if a watcher asked for one:
//
//	      Set(v)
//	        │ 1. publish                 2. retire: close its wake channel
//	        ▼                                         │
//	current ─▶ ┌─ snapshot ────────────┐   ┌─ snapshot ▼───────────┐
//	           │ value v, generation 7 │   │ value u, generation 6 │
//	           │ wake: none asked yet  │   │ wake: closed          │
//	           └───────────────────────┘   └───────────┬───────────┘
//	                       ▲                           │ 3. wakes
//	                       │                           ▼
//	                       └── 4. load: 7 is newer ── Watcher.Get
//	                              than seen, return v  (was waiting on 6)
//
// Watcher.Get loads the current snapshot. If its generation is newer than
// the last one this watcher returned, Get returns its value; otherwise Get
// waits on the snapshot's wake channel (making it if none exists yet) and
// looks again.
//
// Set keeps no list of watchers, never waits for them and never allocates a
// wake channel (the first watcher to wait makes it). The one part of its
// work that grows with the number of watchers is closing the channel, in
// which the Go runtime readies every goroutine parked on it in a single pass
// without waiting for any of them to run. Watchers read without taking a
// lock, and a Watcher holds nothing inside the Value, so a forgotten Watcher
// costs only its own memory.
package memory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"cairn.dev/cairn/pkg/event"
)

// Value is an event.Value kept in memory. The zero value is ready to use and
// holds no value yet: a Get on a new Watcher blocks until the first Set.
// A Value must not be copied after first use; share a pointer to it.
//
// Its Watchers also allow concurrent Gets from several goroutines, which
// then split the updates between them: each Set is returned at most once.
type Value[T any] struct {
	// mu serializes Set, so that generations grow by one and every
	// snapshot's channel is closed exactly once.
	mu sync.Mutex
	// current is nil until the Value is first used.
	current atomic.Pointer[snapshot[T]]
}

var _ event.Value[int] = &Value[int]{}

// snapshot is one state of a Value. Its value and generation never change
// once published.
type snapshot[T any] struct {
	value T
	// generation counts the Sets so far; 0 means no value was ever set.
	generation uint64
	// wake is nil until a watcher waits for this snapshot to be replaced.
	// Set swaps in retired when it replaces the snapshot and closes the
	// channel that was there, if any.
	wake atomic.Pointer[chan struct{}]
}

// retired marks a snapshot that a newer one replaced. Its channel is closed,
// so a watcher that finds it waits for nothing.
var retired = func() *chan struct{} {
	c := make(chan struct{})
	close(c)
	return &c
}()

// wakeChannel returns a channel that is closed once s is replaced.
func (s *snapshot[T]) wakeChannel() <-chan struct{} {
	if c := s.wake.Load(); c != nil {
		return *c
	}
	c := make(chan struct{})
	if s.wake.CompareAndSwap(nil, &c) {
		return c
	}
	// Another watcher made one first, or Set retired s meanwhile.
	return *s.wake.Load()
}

// retire wakes every watcher waiting on s. It is called once per snapshot.
func (s *snapshot[T]) retire() {
	if c := s.wake.Swap(retired); c != nil {
		close(*c)
	}
}

// load returns the current snapshot, publishing the empty one on first use.
func (v *Value[T]) load() *snapshot[T] {
	if s := v.current.Load(); s != nil {
		return s
	}
	v.current.CompareAndSwap(nil, &snapshot[T]{})
	return v.current.Load()
}

// Set replaces the current value and wakes every watcher waiting for it.
// It never blocks on watchers. When T is a pointer, slice or map, the data
// behind it is shared with every watcher: do not mutate it after Set.
func (v *Value[T]) Set(val T) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.load()
	v.current.Store(&snapshot[T]{value: val, generation: old.generation + 1})
	old.retire()
}

// Watch returns a new Watcher that has seen nothing yet.
func (v *Value[T]) Watch() event.Watcher[T] {
	return &watcher[T]{
		value:  v,
		closed: make(chan struct{}),
	}
}

// watcher is one reader's position in a Value's stream of Sets.
type watcher[T any] struct {
	value *Value[T]
	// seen is the generation this watcher returned last. It is advanced by
	// compare-and-swap, so that even concurrent Gets on one watcher never
	// return the same Set twice.
	seen atomic.Uint64
	// closed is closed by Close; closeOnce guards it.
	closed    chan struct{}
	closeOnce sync.Once
}

// Get implements event.Watcher.
func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	o := event.NewGetOptions(opts...)
	for {
		select {
		case <-w.closed:
			return zero, event.ErrWatcherClosed
		default:
		}
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("when waiting for a value: %w", err)
		}

		s := w.value.load()
		if w.claim(s.generation) {
			if o.Accepts(s.value) {
				return s.value, nil
			}
			// Rejected by a filter: it counts as seen, look again.
			continue
		}
		if o.BacklogOnly {
			return zero, event.ErrBacklogDone
		}

		select {
		case <-s.wakeChannel():
		case <-w.closed:
			return zero, event.ErrWatcherClosed
		case <-ctx.Done():
			return zero, fmt.Errorf("when waiting for a value: %w", ctx.Err())
		}
	}
}

// claim marks generation as seen and reports whether it was new to this
// watcher. Generation 0 (nothing set yet) is never new.
func (w *watcher[T]) claim(generation uint64) bool {
	for {
		seen := w.seen.Load()
		if generation <= seen {
			return false
		}
		if w.seen.CompareAndSwap(seen, generation) {
			return true
		}
	}
}

// Close implements event.Watcher.
func (w *watcher[T]) Close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	return nil
}
