package kubernetes

import (
	"context"
	"sync"
	"time"
)

// users makes a component stop after the processes that use it, rather
// than with them. The control plane's runnables all end at once when the
// node loses KubernetesController, but its parts depend on each other: a
// controller-manager or scheduler that stops hands its leader lease over
// by writing it through the node's apiserver, and the apiserver writes
// through the etcd proxy. Stopped together, the write never arrives and
// the next leader waits for the whole lease to run out.
//
// Each user holds the component while its process runs; the component
// runs on a context from outlive, which ends once its own has ended and
// every user has let go.
type users struct {
	mu sync.Mutex
	n  int
	// idle is closed while n is zero.
	idle chan struct{}
}

func newUsers() *users {
	idle := make(chan struct{})
	close(idle)
	return &users{idle: idle}
}

// hold marks one user running until the returned function is called; it
// may be called more than once.
func (u *users) hold() (release func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == 0 {
		u.idle = make(chan struct{})
	}
	u.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.n--
			if u.n == 0 {
				close(u.idle)
			}
		})
	}
}

// idleNow returns a channel that is closed once no user holds u.
func (u *users) idleNow() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.idle
}

// outlive returns a context with ctx's values (the runnable's logger and
// place in the tree) that ends once ctx has ended and no user holds u, or
// at the latest grace after ctx ended: a user that does not stop must not
// keep the component running. It ends with ctx's cause. The returned
// function ends it at once, and must be called when the component has
// stopped.
func (u *users) outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-u.idleNow():
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
