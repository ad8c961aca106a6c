package holds

import (
	"context"
	"errors"
	"testing"
	"time"
)

// ended reports whether ctx ends within d.
func ended(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// TestCount checks the count of holds: None is closed at once with no
// hold, and once the last of two holds is released.
func TestCount(t *testing.T) {
	var h Count
	select {
	case <-h.None():
	default:
		t.Fatal("None() with no hold is open, want closed")
	}
	r1, r2 := h.Take(), h.Take()
	done := h.None()
	r1()
	r1()
	select {
	case <-done:
		t.Fatal("None() closed with one hold left")
	default:
	}
	r2()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("None() still open after the last release")
	}
	r3 := h.Take()
	select {
	case <-h.None():
		t.Fatal("None() closed while a new hold is taken")
	default:
	}
	r3()
}

// TestOutlive: a part's context outlives its own while a user holds it,
// ends with its cause once every user has let go, and ends at the grace
// for a user that never does.
func TestOutlive(t *testing.T) {
	t.Run("after its users", func(t *testing.T) {
		var u Count
		cause := errors.New("role removed")
		parent, cancel := context.WithCancelCause(context.Background())
		ctx, stop := u.Outlive(parent, time.Minute)
		defer stop()
		first, second := u.Take(), u.Take()
		cancel(cause)
		if ended(ctx, 200*time.Millisecond) {
			t.Fatal("the component stopped while two users ran")
		}
		first()
		first() // a second call changes nothing
		if ended(ctx, 200*time.Millisecond) {
			t.Fatal("the component stopped while a user ran")
		}
		second()
		if !ended(ctx, 10*time.Second) {
			t.Fatal("the component did not stop once its users had")
		}
		if got := context.Cause(ctx); !errors.Is(got, cause) {
			t.Errorf("the component stopped because %v, want %v", got, cause)
		}
	})
	t.Run("no users", func(t *testing.T) {
		var u Count
		u.Take()() // a user that came and went
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := u.Outlive(parent, time.Minute)
		defer stop()
		if ended(ctx, 100*time.Millisecond) {
			t.Fatal("the component stopped before its own context ended")
		}
		cancel()
		if !ended(ctx, 10*time.Second) {
			t.Fatal("the component did not stop with its context")
		}
	})
	t.Run("a user that never stops", func(t *testing.T) {
		var u Count
		defer u.Take()()
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := u.Outlive(parent, 300*time.Millisecond)
		defer stop()
		start := time.Now()
		cancel()
		if !ended(ctx, 10*time.Second) {
			t.Fatal("the component outlived the grace")
		}
		if waited := time.Since(start); waited < 300*time.Millisecond {
			t.Errorf("the component stopped %v after its context, before the grace", waited)
		}
	})
	t.Run("stopped on its own", func(t *testing.T) {
		var u Count
		defer u.Take()()
		ctx, stop := u.Outlive(context.Background(), time.Minute)
		stop()
		if !ended(ctx, 10*time.Second) {
			t.Fatal("the component's context lived on after it stopped")
		}
	})
	t.Run("values", func(t *testing.T) {
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "runnable")
		ctx, stop := (&Count{}).Outlive(parent, time.Minute)
		defer stop()
		if ctx.Value(key{}) != "runnable" {
			t.Error("the component's context lost its runnable's values")
		}
	})
}
