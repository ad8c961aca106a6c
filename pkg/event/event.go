package event

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// Value is a typed observable value: the latest state of one thing (a node's
// address, its membership, its roles) that any number of readers follow.
//
// Implementations must be safe for concurrent use. Set never blocks on
// watchers, however slow they are.
type Value[T any] interface {
	Watchable[T]
	// Set replaces the current value and wakes every watcher that waits for
	// a newer one.
	//
	// When T is a pointer, slice, map or a struct holding any of them, the
	// data behind it is shared with every watcher that receives it: the
	// caller must not mutate it after Set (set a fresh copy instead), and
	// watchers must treat what they get as read-only.
	Set(v T)
}

// Watchable is the reading half of a Value: what a consumer takes, so that
// its signature shows it only follows the value and someone else writes
// it. Every Value is a Watchable.
type Watchable[T any] interface {
	// Watch returns a new Watcher that has seen nothing yet: its first Get
	// returns the current value, if there is one.
	Watch() Watcher[T]
}

// Watcher follows the updates of one Value. It remembers which update it
// returned last, so a Watcher never returns the same Set twice, and when
// several Sets happened since its last Get, it returns only the newest: a
// slow reader skips intermediate values rather than queueing them.
//
// A Watcher is meant to be read from one goroutine. Close may be called from
// any goroutine, at any time, to release it.
type Watcher[T any] interface {
	// Get returns the current value if this Watcher has not returned it yet.
	// Otherwise it blocks until a newer value is Set, ctx is done (the error
	// then wraps ctx.Err()) or the Watcher is closed (ErrWatcherClosed).
	// Options change what Get accepts and whether it blocks at all.
	Get(ctx context.Context, opts ...GetOption[T]) (T, error)
	// Close releases the Watcher and makes every blocked and future Get
	// return ErrWatcherClosed. Closing twice is harmless.
	Close() error
}

// ErrBacklogDone is what Get returns under BacklogOnly when the Watcher has
// already seen the current value, instead of blocking for a new one.
var ErrBacklogDone = errors.New("no more backlogged values")

// ErrWatcherClosed is what Get returns on a Watcher that has been closed,
// including a Get that was blocked when Close was called.
var ErrWatcherClosed = errors.New("watcher closed")

// GetOption changes how a single Get call behaves. Build one with Filter,
// NotNil or BacklogOnly; implementations of Watcher read them with
// NewGetOptions.
type GetOption[T any] func(*GetOptions[T])

// GetOptions is the combined effect of the GetOption values of one Get. It
// exists for implementations of Watcher; callers use Filter and BacklogOnly.
type GetOptions[T any] struct {
	// Predicates must all accept a value for Get to return it. Values that
	// any predicate rejects are consumed (never returned later) and Get goes
	// on waiting for the next one. They are asked in the order of the
	// options, and the first that rejects a value ends the check.
	Predicates []func(T) bool
	// BacklogOnly makes Get return ErrBacklogDone instead of blocking when
	// no acceptable, unseen value is there.
	BacklogOnly bool
}

// NewGetOptions combines opts into the settings of one Get call.
func NewGetOptions[T any](opts ...GetOption[T]) GetOptions[T] {
	if len(opts) == 0 {
		// Spares the allocation that handing o to the options costs.
		return GetOptions[T]{}
	}
	var o GetOptions[T]
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Accepts reports whether every predicate accepts v, asking them in order
// and stopping at the first that rejects it.
func (o GetOptions[T]) Accepts(v T) bool {
	for _, pred := range o.Predicates {
		if !pred(v) {
			return false
		}
	}
	return true
}

// Filter makes Get return only values for which pred returns true; it skips
// the others, blocking as needed. Several Filters on one Get must all agree.
// A nil pred accepts everything.
func Filter[T any](pred func(T) bool) GetOption[T] {
	return func(o *GetOptions[T]) {
		if pred != nil {
			o.Predicates = append(o.Predicates, pred)
		}
	}
}

// NotNil makes Get return only a T that is not nil, skipping nil ones: the
// wait for a Value that starts out nil until its writer knows something,
// such as a node's credentials. T is the Value's type: a pointer, slice,
// map, channel, func or interface type; NotNil panics for any other.
//
// A Filter after NotNil on the same Get never sees nil, so it need not
// check for it.
func NotNil[T any]() GetOption[T] {
	switch t := reflect.TypeFor[T](); t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
	default:
		panic(fmt.Sprintf("event.NotNil[%v]: a %v is never nil", t, t.Kind()))
	}
	return Filter(func(v T) bool { return !reflect.ValueOf(&v).Elem().IsNil() })
}

// BacklogOnly makes Get return the current value if the Watcher has not seen
// it yet, and ErrBacklogDone at once otherwise, never blocking. It lets a
// caller take what is already there and move on.
func BacklogOnly[T any]() GetOption[T] {
	return func(o *GetOptions[T]) {
		o.BacklogOnly = true
	}
}

// Get waits once for a value of value that every option accepts, which may
// be the current one, and returns it: a Watcher of its own, closed on
// return, for a reader that needs one value rather than to follow them,
// such as a node's credentials before it starts. Its error is the
// Watcher's.
func Get[T any](ctx context.Context, value Watchable[T], opts ...GetOption[T]) (T, error) {
	w := value.Watch()
	defer w.Close()
	return w.Get(ctx, opts...)
}

// Pipe copies every update of value into c from a goroutine of its own
// until ctx is done. Returns at once.
//
// Pipe lets one runnable select over several Values, or over a Value and a
// timer, in one loop. Like a Watcher, a pipe skips updates that are stale by
// the time it can deliver them: while a send into c waits for its reader,
// newer Sets are not queued, and the send after it carries the newest value.
// opts apply to every Get of the pipe's Watcher.
//
// Pipe never closes c, so several Pipes may feed one channel. Its goroutine
// closes its Watcher and exits as soon as ctx is done, also while it waits
// to send into c; it exits earlier only when Get fails for another reason,
// as it does under BacklogOnly once the current value was sent.
func Pipe[T any](ctx context.Context, value Watchable[T], c chan<- T, opts ...GetOption[T]) {
	w := value.Watch()
	go func() {
		defer w.Close()
		for {
			v, err := w.Get(ctx, opts...)
			if err != nil {
				return
			}
			select {
			case c <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
}
