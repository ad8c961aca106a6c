package roleserve

import (
	"errors"
	"net/netip"
	"testing"

	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// TestRunForStartsOnceAndStopsOnChange checks that runFor waits for both
// roles and address, starts once, passes over states that fit, and
// returns the error of the first that does not.
func TestRunForStartsOnceAndStopsOnChange(t *testing.T) {
	ctx := fixture.Context(t)
	var (
		roles   memory.Value[*api.NodeRoles]
		address memory.Value[netip.Prefix]
	)
	first := netip.MustParseAddr("10.42.0.10")
	moved := netip.MustParseAddr("10.42.0.11")
	started := make(chan netip.Addr, 2)
	checked := make(chan netip.Addr)
	errMoved := errors.New("moved")
	done := make(chan error, 1)
	go func() {
		done <- nodeInputs{roles: &roles, address: &address}.runFor(ctx,
			func(s nodeState) error {
				started <- s.ip
				return nil
			},
			func(was, now nodeState) error {
				checked <- now.ip
				if now.ip != was.ip {
					return errMoved
				}
				return nil
			})
	}()

	address.Set(netip.PrefixFrom(first, 24))
	roles.Set(&api.NodeRoles{})
	if ip := <-started; ip != first {
		t.Fatalf("started on %s, want %s", ip, first)
	}
	// New roles on the same address fit.
	roles.Set(&api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}})
	if ip := <-checked; ip != first {
		t.Fatalf("checked %s, want %s", ip, first)
	}
	address.Set(netip.PrefixFrom(moved, 24))
	if ip := <-checked; ip != moved {
		t.Fatalf("checked %s, want %s", ip, moved)
	}
	if err := <-done; !errors.Is(err, errMoved) {
		t.Errorf("runFor = %v, want %v", err, errMoved)
	}
	if len(started) != 0 {
		t.Errorf("started again on %s", <-started)
	}
}
