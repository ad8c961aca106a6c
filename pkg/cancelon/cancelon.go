// Package cancelon ends a context when a stream of events says so: a
// server that must cut a call short when something changes (a caller's
// record in etcd, say) runs the call under the context it returns.
//
// Each Context (or Value, which follows an event.Watchable instead of a
// channel) starts one goroutine, which lives until the events channel
// closes, judge returns an error, or stop is called; stop waits for it, so
// nothing outlives the caller.
package cancelon

import (
	"context"
	"fmt"

	"cairn.dev/cairn/pkg/event"
)

// Context returns a context derived from parent that is cancelled, with
// judge's error as its cause (context.Cause), at the first event for which
// judge returns an error. open is called once, before Context returns, with
// a context that ends when the returned one does, and must return a channel
// that closes once that context ends. stop cancels the returned context and
// waits until the goroutine reading the channel has returned; call it when
// the work under the context is done.
func Context[T any](parent context.Context, open func(context.Context) <-chan T, judge func(T) error) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	events := open(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if err := judge(ev); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
	}
}

// Value is Context for the values of v: the returned context is cancelled,
// with judge's error as its cause, at the first value of v that judge
// refuses, the current one included, or with a wrapped error when v can no
// longer be read (a Watcher of an etcd-backed Value whose decoding fails):
// a server that cannot tell whether a call may go on ends it. stop is as
// for Context.
func Value[T any](parent context.Context, v event.Watchable[T], judge func(T) error) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	w := v.Watch()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		for {
			x, err := w.Get(ctx)
			if err != nil {
				if ctx.Err() == nil {
					cancel(fmt.Errorf("when following the value the context depends on: %w", err))
				}
				return
			}
			if err := judge(x); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
	}
}
