package main

import (
	"context"
	"errors"
	"fmt"

	"cairn.dev/cairn/pkg/supervisor"
)

// A child is a named runnable the root starts. The node's services (power
// today; network, storage, enrolment next) are each one entry of the list
// the core hands to rootRunnable.
type child struct {
	name string
	run  supervisor.Runnable
}

// errTestRootFail is the root's error under the test-only flag
// cairn.test.root-fail.
var errTestRootFail = errors.New("failing on purpose: " + flagTestRootFail + " is set on the kernel command line (test-only flag)")

// rootRunnable returns the root of the node's supervision tree. It starts
// children, each as a runnable of its own, says it is healthy, and runs
// until the tree is stopped. With failForTest it fails at once instead.
func rootRunnable(children []child, failForTest bool) supervisor.Runnable {
	return func(ctx context.Context) error {
		if failForTest {
			return errTestRootFail
		}
		for _, c := range children {
			if err := supervisor.Run(ctx, c.name, c.run); err != nil {
				return fmt.Errorf("when starting %s: %w", c.name, err)
			}
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-ctx.Done()
		return ctx.Err()
	}
}
