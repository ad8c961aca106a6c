package kubernetes

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

// TestUsersOrderTheStop: a component's context outlives its own while a
// user holds it, ends with its cause once every user has let go, and ends
// at the grace for a user that never does.
func TestUsersOrderTheStop(t *testing.T) {
	t.Run("after its users", func(t *testing.T) {
		u := newUsers()
		cause := errors.New("role removed")
		parent, cancel := context.WithCancelCause(context.Background())
		ctx, stop := u.outlive(parent, time.Minute)
		defer stop()
		first, second := u.hold(), u.hold()
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
		u := newUsers()
		u.hold()() // a user that came and went
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := u.outlive(parent, time.Minute)
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
		u := newUsers()
		defer u.hold()()
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := u.outlive(parent, 300*time.Millisecond)
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
		u := newUsers()
		defer u.hold()()
		ctx, stop := u.outlive(context.Background(), time.Minute)
		stop()
		if !ended(ctx, 10*time.Second) {
			t.Fatal("the component's context lived on after it stopped")
		}
	})
	t.Run("values", func(t *testing.T) {
		type key struct{}
		parent := context.WithValue(context.Background(), key{}, "runnable")
		ctx, stop := newUsers().outlive(parent, time.Minute)
		defer stop()
		if ctx.Value(key{}) != "runnable" {
			t.Error("the component's context lost its runnable's values")
		}
	})
}
