package sleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	ctx := context.Background()
	if err := For(ctx, time.Millisecond); err != nil {
		t.Errorf("For(1ms) = %v, want nil", err)
	}
	if err := For(ctx, -time.Second); err != nil {
		t.Errorf("For(-1s) = %v, want nil", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, d := range []time.Duration{0, time.Hour} {
		if err := For(cctx, d); !errors.Is(err, context.Canceled) {
			t.Errorf("For(%v) on a cancelled context = %v, want %v", d, err, context.Canceled)
		}
	}
}
