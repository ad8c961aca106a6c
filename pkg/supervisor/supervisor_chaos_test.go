package supervisor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/fixture"
)

// chaosSpec describes one runnable of the chaos tree and its children, in
// groups: each inner slice is started with one RunGroup.
type chaosSpec struct {
	name   string
	groups [][]chaosSpec
}

// chaosTree is the tree the chaos test shakes: 30 runnables, a chain four
// deep, groups of one to three, groups with subtrees.
var chaosTree = chaosSpec{name: "root", groups: [][]chaosSpec{
	{{name: "net", groups: [][]chaosSpec{
		{{name: "link"}},
		{{name: "dhcp", groups: [][]chaosSpec{{{name: "lease"}}, {{name: "renew"}}}}},
		{{name: "hosts"}, {name: "resolv"}},
		{{name: "wireguard"}},
	}}},
	{{name: "storage", groups: [][]chaosSpec{
		{{name: "esp"}, {name: "data", groups: [][]chaosSpec{
			{{name: "crypt", groups: [][]chaosSpec{{{name: "mkfs"}}}}},
		}}},
		{{name: "tmpfs"}},
		{{name: "quota"}},
	}}},
	{{name: "roles", groups: [][]chaosSpec{
		{{name: "etcd", groups: [][]chaosSpec{{{name: "peer"}, {name: "client"}}}},
			{name: "curator", groups: [][]chaosSpec{{{name: "leader"}}, {{name: "rpc"}}}}},
		{{name: "kubelet", groups: [][]chaosSpec{{{name: "pods"}}, {{name: "csi"}}}}},
		{{name: "heartbeat"}},
	}}},
	{{name: "console"}, {name: "metrics"}, {name: "ntp"}},
}}

// chaosRunnables builds the runnables of spec, whose DN is dn, in f, and
// returns the DNs of all of them.
func chaosRunnables(f *fleet, spec chaosSpec, dn string) (Runnable, []string) {
	dns := []string{dn}
	var groups []map[string]Runnable
	for _, g := range spec.groups {
		group := map[string]Runnable{}
		for _, child := range g {
			r, childDNs := chaosRunnables(f, child, dn+"."+child.name)
			group[child.name] = r
			dns = append(dns, childDNs...)
		}
		groups = append(groups, group)
	}
	r := f.runnable(dn, func(ctx context.Context) error {
		for _, g := range groups {
			if err := RunGroup(ctx, g); err != nil {
				return err
			}
		}
		return nil
	})
	return r, dns
}

// TestChaos kills random runnables of a tree of 30 for a few seconds, by
// errors, panics and nil returns, then checks that the whole tree comes back
// healthy and that stopping it leaves no goroutine behind.
func TestChaos(t *testing.T) {
	const duration = 3 * time.Second
	f := newFleet()
	root, dns := chaosRunnables(f, chaosTree, "root")
	if len(dns) != 30 {
		t.Fatalf("chaos tree has %d runnables, want 30", len(dns))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(ctx, root, WithBackoff(time.Millisecond, 20*time.Millisecond))

	rng := rand.New(rand.NewPCG(1, 2))
	kills := 0
	for end := time.Now().Add(duration); time.Now().Before(end); {
		dn := dns[rng.IntN(len(dns))]
		f.mu.Lock()
		inst := f.live[dn]
		f.mu.Unlock()
		if inst != nil {
			select {
			case inst.cmds <- command(rng.IntN(3)):
				kills++
			default:
			}
		}
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
	}
	t.Logf("sent %d kills in %v", kills, duration)

	fixture.Eventually(t, waitTimeout, "every runnable live again", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, dn := range dns {
			inst := f.live[dn]
			if inst == nil || inst.ctx.Err() != nil {
				return fmt.Errorf("%s is not healthy", dn)
			}
		}
		return nil
	})
	// The supervisor agrees: every runnable is healthy, none is missing.
	fixture.Eventually(t, waitTimeout, "supervisor seeing every runnable healthy", func() error {
		states := s.inspect()
		if len(states) != len(dns) {
			return fmt.Errorf("supervisor knows %d runnables, want %d", len(states), len(dns))
		}
		for dn, st := range states {
			if st != stateHealthy {
				return fmt.Errorf("%s is %v", dn, st)
			}
		}
		return nil
	})
	cancel()
	if err := waitFor(t, s); err != nil {
		t.Errorf("Wait() = %v, want nil", err)
	}
	goleak.VerifyNone(t)
}

// BenchmarkSupervisorRestart measures the time from a runnable's death to
// its next instance signalling Healthy, with the backoff at its minimum.
func BenchmarkSupervisorRestart(b *testing.B) {
	healthy := make(chan chan struct{})
	victim := func(ctx context.Context) error {
		Signal(ctx, SignalHealthy)
		die := make(chan struct{})
		select {
		case healthy <- die:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-die:
			return fmt.Errorf("killed by the benchmark")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, func(ctx context.Context) error {
		if err := Run(ctx, "victim", victim); err != nil {
			return err
		}
		return idle(ctx)
	}, WithBackoff(0, 0))
	// Signal happens before the victim offers its die channel, so
	// receiving it means the supervisor has seen the instance healthy.
	die := <-healthy
	b.ResetTimer()
	for range b.N {
		close(die)
		die = <-healthy
	}
	b.StopTimer()
	cancel()
	s.Wait()
}
