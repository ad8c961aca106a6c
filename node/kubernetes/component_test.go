package kubernetes

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestRunComponentRenews: a component still running when its certificates
// are due is stopped and its runnable returns errRenew, so that its
// supervisor starts it again with fresh ones; a component that exits on
// its own is an error.
func TestRunComponentRenews(t *testing.T) {
	got := make(chan error, 2)
	supervisortest.Harness(t, func(ctx context.Context) error {
		err := Layout{}.runComponent(ctx, exec.Command("sleep", "60"), time.Now().Add(time.Second))
		got <- err
		err = Layout{}.runComponent(ctx, exec.Command("true"), time.Time{})
		got <- err
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	})
	select {
	case err := <-got:
		if !errors.Is(err, errRenew) {
			t.Errorf("runComponent at renewal = %v, want errRenew", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("runComponent did not stop the component at renewal")
	}
	if err := <-got; err == nil || errors.Is(err, errRenew) {
		t.Errorf("runComponent of a component that exited = %v, want an error saying so", err)
	}
}
