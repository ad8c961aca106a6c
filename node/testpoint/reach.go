//go:build cairntest

package testpoint

import (
	"context"
	"fmt"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/supervisor"
)

// stopKey is the context key under which WithStopAt keeps its step.
type stopKey struct{}

// WithStopAt returns a copy of ctx under which Reach stops at step. A test
// image's /init arms the context of its supervision tree with it, so that
// every runnable's context carries the step.
func WithStopAt(ctx context.Context, step Step) context.Context {
	return context.WithValue(ctx, stopKey{}, step)
}

// Reach says that the caller, a runnable or code it runs, has just
// reached step. Unless ctx was armed for that step, it returns nil at
// once. At the armed step it states marker.TestPointReached through the
// runnable's logger and blocks until ctx ends, then returns an error
// wrapping ctx's: the caller goes no further, as after a power cut, and
// a test kills the machine while it waits.
func Reach(ctx context.Context, step Step) error {
	if armed, _ := ctx.Value(stopKey{}).(Step); armed != step {
		return nil
	}
	marker.Log(supervisor.Logger(ctx), marker.TestPointReached, "name", string(step))
	<-ctx.Done()
	return fmt.Errorf("stopped at test point %s: %w", step, ctx.Err())
}
