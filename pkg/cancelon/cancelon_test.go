package cancelon

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/event/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// feed returns an open func whose channel carries what send gets, and
// closes when its context ends.
func feed(send <-chan int) func(context.Context) <-chan int {
	return func(ctx context.Context) <-chan int {
		out := make(chan int)
		go func() {
			defer close(out)
			for {
				select {
				case <-ctx.Done():
					return
				case v := <-send:
					select {
					case out <- v:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
		return out
	}
}

// TestCancelOnJudgement: events the judge accepts leave the context
// alone; the first it refuses cancels it with the judge's error.
func TestCancelOnJudgement(t *testing.T) {
	send := make(chan int)
	errOdd := errors.New("odd")
	ctx, stop := Context(context.Background(), feed(send), func(v int) error {
		if v%2 == 1 {
			return errOdd
		}
		return nil
	})
	defer stop()
	send <- 2
	send <- 4
	if ctx.Err() != nil {
		t.Fatalf("context ended after accepted events: %v", context.Cause(ctx))
	}
	send <- 5
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context not cancelled after a refused event")
	}
	if !errors.Is(context.Cause(ctx), errOdd) {
		t.Errorf("cause = %v, want %v", context.Cause(ctx), errOdd)
	}
}

// TestStop: stop ends the context without a judged cause, and waits for
// the goroutine (goleak checks that none is left).
func TestStop(t *testing.T) {
	send := make(chan int)
	ctx, stop := Context(context.Background(), feed(send), func(int) error { return nil })
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("cause after stop = %v, want context.Canceled", context.Cause(ctx))
	}
}

// TestValue: Value judges the current value of a Watchable, then every new
// one, and ends the context at the first it refuses.
func TestValue(t *testing.T) {
	var v memory.Value[int]
	v.Set(2)
	errOdd := errors.New("odd")
	judged := make(chan int, 10)
	ctx, stop := Value(context.Background(), &v, func(x int) error {
		judged <- x
		if x%2 == 1 {
			return errOdd
		}
		return nil
	})
	defer stop()
	if x := <-judged; x != 2 {
		t.Fatalf("first value judged = %d, want the current one, 2", x)
	}
	v.Set(4)
	if x := <-judged; x != 4 {
		t.Fatalf("value judged after Set(4) = %d, want 4", x)
	}
	if ctx.Err() != nil {
		t.Fatalf("context ended after accepted values: %v", context.Cause(ctx))
	}
	v.Set(5)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("context not cancelled after a refused value")
	}
	if !errors.Is(context.Cause(ctx), errOdd) {
		t.Errorf("cause = %v, want %v", context.Cause(ctx), errOdd)
	}
}
