// Package holds lets a part of the node stop after its users rather than
// with them. The parts of a supervision tree are stopped at the same
// moment, but some users have a last call to make on their way down
// through a part they depend on: the curator resigns its leadership
// through etcd, a Kubernetes controller-manager hands its leader lease
// over through the apiserver. Each such user takes a hold on the part
// while it runs; the part keeps serving, once asked to stop, until no hold
// is left or a grace has passed.
package holds

import (
	"context"
	"sync"
	"time"
)

// Count counts the holds taken on one part and not yet released. Its zero
// value has none.
type Count struct {
	mu sync.Mutex
	n  int
	// released is closed, and replaced, each time n drops to zero.
	released chan struct{}
}

// Take takes a hold and returns its release, which may be called more
// than once.
func (h *Count) Take() (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.n--
			if h.n == 0 && h.released != nil {
				close(h.released)
				h.released = nil
			}
		})
	}
}

// None returns a channel that is closed once no hold is left: at once if
// none is taken.
func (h *Count) None() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if h.released == nil {
		h.released = make(chan struct{})
	}
	return h.released
}

// Outlive returns a context for the part's work with ctx's values (a
// runnable's logger and place in the tree) that ends once ctx has ended
// and no hold is left, or at the latest grace after ctx ended: a user that
// does not stop must not keep the part running. It ends with ctx's cause.
// The returned function ends it at once, and must be called when the
// part has stopped.
func (h *Count) Outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-h.None():
		case <-t.C:
		case <-octx.Done():
		}
		cancel(context.Cause(ctx))
	})
	return octx, func() {
		stop()
		cancel(context.Canceled)
	}
}
