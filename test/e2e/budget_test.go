//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// budgetSeen is one status of a PodDisruptionBudget as a watch saw it.
type budgetSeen struct {
	at               time.Time
	healthy, desired int
}

// A budgetWatch follows a PodDisruptionBudget's status with kubectl get
// --watch, which prints every change the disruption controller makes. A
// watch that ends (its apiserver rebooting, say) is started again, and its
// first line is the status as it is then: a status that came and went
// while no watch ran is not seen.
type budgetWatch struct {
	mu     sync.Mutex
	seen   []budgetSeen
	errs   int
	cancel context.CancelFunc
	done   chan struct{}
}

// watchBudget starts following PodDisruptionBudget name until stop.
func (k *kube) watchBudget(t *testing.T, name string) *budgetWatch {
	ctx, cancel := context.WithCancel(k.s.ctx)
	w := &budgetWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			if err := w.follow(ctx, k, name); err != nil && ctx.Err() == nil {
				w.mu.Lock()
				w.errs++
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	t.Cleanup(func() { _, _ = w.stop() })
	return w
}

// follow runs one watch until it ends.
func (w *budgetWatch) follow(ctx context.Context, k *kube, name string) error {
	cmd := exec.CommandContext(ctx, k.kubectl, "--kubeconfig", k.config, "get", "poddisruptionbudget", name, "--watch",
		"-o", `jsonpath={.status.currentHealthy} {.status.desiredHealthy}{"\n"}`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var b budgetSeen
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &b.healthy, &b.desired); err != nil {
			continue // a budget whose status is not yet computed
		}
		b.at = time.Now()
		w.mu.Lock()
		w.seen = append(w.seen, b)
		w.mu.Unlock()
	}
	return cmd.Wait()
}

// stop ends the watch and returns every status it saw, and how many
// watches ended in an error (an apiserver away).
func (w *budgetWatch) stop() ([]budgetSeen, int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, w.errs
}
