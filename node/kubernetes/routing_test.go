package kubernetes

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/supervisor/supervisortest"
)

// TestRoutingRemovedWithLastUnit programs what kube-proxy, NetworkPolicy
// and the pod routes leave (kube-proxy's tables in both families, the
// policy table, a pod route) in a network namespace of its own, beside a
// table and a route that are not theirs. A unit that stops while another still runs, and a runnable that
// fails on its own, leave it all; the last unit stopping removes exactly
// kube-proxy's tables, the policy table and Cairn's routes.
func TestRoutingRemovedWithLastUnit(t *testing.T) {
	ns, nl := routedNamespace(t)
	nf, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []*nftables.Table{
		{Family: nftables.TableFamilyIPv4, Name: proxyTable},
		{Family: nftables.TableFamilyIPv6, Name: proxyTable},
		{Family: nftables.TableFamilyIPv4, Name: policyTable},
		{Family: nftables.TableFamilyIPv4, Name: "firewall"},
	} {
		nf.AddTable(table)
		nf.AddChain(&nftables.Chain{Name: "services", Table: table})
	}
	if err := nf.Flush(); err != nil {
		t.Fatal(err)
	}
	tun := tunnelStandIn(t, nl)
	if err := routeThroughTunnel(nl, tun, []netip.Addr{netip.MustParseAddr("10.42.0.20")}); err != nil {
		t.Fatal(err)
	}
	tables := func() []string {
		ts, err := nf.ListTables()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, t := range ts {
			names = append(names, tableName(t))
		}
		slices.Sort(names)
		return names
	}
	check := func(when string, wantTables []string, wantTunnel bool) {
		t.Helper()
		if got := tables(); !slices.Equal(got, wantTables) {
			t.Errorf("%s: tables %q, want %q", when, got, wantTables)
		}
		_, err := nl.LinkByName(tunnelDevice)
		if got := err == nil; got != wantTunnel {
			t.Errorf("%s: tunnel device there %t (%v), want %t", when, got, err, wantTunnel)
		}
		var routes int
		for _, table := range []int{unix.RT_TABLE_MAIN, controllerTable} {
			rs, err := listPodRoutes(nl, table)
			if err != nil {
				t.Fatal(err)
			}
			routes += len(rs)
		}
		rules, err := controllerRules(nl)
		if err != nil {
			t.Fatal(err)
		}
		if got := routes == 2 && len(rules) == 1; got != wantTunnel {
			t.Errorf("%s: %d pod routes and %d rules there, want them %t", when, routes, len(rules), wantTunnel)
		}
		if routeMap(t, nl)["172.16.0.0/16"] != "10.42.0.1" {
			t.Errorf("%s: the route that is not Cairn's is gone", when)
		}
	}
	all := []string{"ip cairn-policy", "ip firewall", "ip kube-proxy", "ip6 kube-proxy"}

	r := &Routing{
		nfOpts: []nftables.ConnOption{nftables.WithNetNSFd(int(ns))},
		nlOpen: func() (*netlink.Handle, error) { return netlink.NewHandleAt(ns) },
	}
	// The units' runnables log through the supervisor.
	runnable := make(chan context.Context)
	supervisortest.Harness(t, func(ctx context.Context) error {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		runnable <- ctx
		<-ctx.Done()
		return ctx.Err()
	})
	var ctx context.Context
	select {
	case ctx = <-runnable:
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor did not start the test's runnable")
	}
	// A controller's Services stop as the node becomes a worker, whose
	// kube-proxy has started.
	services, stopServices := context.WithCancel(ctx)
	releaseServices := r.hold(services)
	worker, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	releaseWorker := r.hold(worker)
	stopServices()
	releaseServices()
	check("after the Services stopped beside a worker", all, true)
	// The worker's kube-proxy crashes, or restarts to renew its
	// certificates: its unit still runs.
	releaseWorker()
	check("after kube-proxy failed on its own", all, true)
	// It runs again, then the node loses KubernetesWorker.
	releaseWorker = r.hold(worker)
	stopWorker()
	releaseWorker()
	check("after the last unit stopped", []string{"ip firewall"}, false)
}
