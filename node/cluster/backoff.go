package cluster

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"cairn.dev/cairn/pkg/sleep"
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
	return sleep.For(ctx, b.NextBackOff())
}
