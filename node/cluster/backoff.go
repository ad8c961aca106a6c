package cluster

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// newBackoff returns an exponential backoff from min to max, doubling
// without jitter and never giving up; wait on it with sleepNext.
func newBackoff(min, max time.Duration) backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = min
	b.MaxInterval = max
	b.Multiplier = 2
	b.RandomizationFactor = 0
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// sleepNext waits for b's next interval or until ctx is done.
func sleepNext(ctx context.Context, b backoff.BackOff) error {
	return sleepCtx(ctx, b.NextBackOff())
}

// sleepCtx waits for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
