// Package sleep waits for a while unless a context ends first: the pause
// between two tries of a runnable, which must return as soon as its
// supervisor cancels it, where time.Sleep would hold it up.
package sleep

import (
	"context"
	"time"
)

// For waits for d, or until ctx is done, and then returns ctx's error, if
// any. A d of zero or less does not wait.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
