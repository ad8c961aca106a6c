//go:build e2e

package e2e

import (
	"flag"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

var (
	soakFlag    = flag.Duration("soak", 0, "how long TestFailoverSoak watches a loaded three-node cluster for false elections before it kills the leader (make bench-failover: 10m); 0 skips it")
	burnersFlag = flag.Int("soak-burners", runtime.NumCPU(), "busy processes TestFailoverSoak runs on the host beside the nodes while it watches, to load the machine")
)

// lostLeaseLine is the curator's error when its election lease expired
// under it: the false election this soak counts.
var lostLeaseLine = launch.Substring("lost the lease")

// TestFailoverSoak is the failover benchmark (make bench-failover), not a
// test of make test: a three-node cluster of consensus members, the
// machine loaded by busy processes beside the nodes and the prober's
// calls, is watched for -soak (ten minutes in make bench-failover) for
// false elections: a curator taking the lead, a curator losing its lease,
// etcd changing leaders, all while no machine failed. Then the curator
// leader's VM is killed, still under load, and the time until another
// leads and Management is served again is measured.
//
// The figures are the benchmark's output: only the cluster failing to
// form, to serve, or to fail over fails it.
func TestFailoverSoak(t *testing.T) {
	if *soakFlag <= 0 {
		t.Skip("the failover soak runs for minutes: make bench-failover runs it (or pass -soak)")
	}
	s := newSuite(t, 3, *soakFlag+25*time.Minute)
	c := s.newCluster(3, 0)
	nodes := c.Nodes()
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the cluster: %v", err)
	}
	s.addConsensusMembers(t, c, nodes[1:])
	o := readOwner(t, c.ConfigDir())
	p := startProber(t, c, o)
	if _, err := p.waitOK(s.ctxWithin(2*time.Minute), time.Now()); err != nil {
		t.Fatalf("the cluster does not serve: %v", err)
	}
	if l, _ := leader(c); l == nil {
		t.Fatal("no node says it leads")
	}

	// The busy processes run until the test ends, through the kill.
	fixture.Busy(t, *burnersFlag)
	marks := map[*cluster.Node]int{}
	etcd0 := map[*cluster.Node]float64{}
	for _, n := range nodes {
		marks[n] = n.Mark()
		etcd0[n] = s.metric(t, c, n, "etcd_server_leader_changes_seen_total")
	}
	start := time.Now()
	t.Logf("soak: %d busy processes on the host, %d nodes, watching for %v", *burnersFlag, len(nodes), *soakFlag)
	count := func(m launch.Matcher) int {
		total := 0
		for _, n := range nodes {
			for _, l := range n.VM().Console().Lines()[marks[n]:] {
				if m.MatchString(l.Text) {
					total++
				}
			}
		}
		return total
	}
	for end := start.Add(*soakFlag); time.Now().Before(end); {
		select {
		case <-s.ctx.Done():
			t.Fatalf("the suite's deadline passed during the soak")
		case <-time.After(min(time.Minute, time.Until(end))):
		}
		t.Logf("soak: %v: %d curators took the lead, %d lost their lease; Management probes: %v",
			time.Since(start).Round(time.Second), count(leadsLine), count(lostLeaseLine), p.between(start, time.Now()))
	}
	leads, lost := count(leadsLine), count(lostLeaseLine)
	var etcdChanges float64
	for _, n := range nodes {
		// Every member counts each change it sees: the most any saw.
		etcdChanges = max(etcdChanges, s.metric(t, c, n, "etcd_server_leader_changes_seen_total")-etcd0[n])
	}
	probes := p.between(start, time.Now())
	s.step("soak: watched under load", time.Since(start))
	s.step("soak: longest Management outage", probes.longest)
	t.Logf("soak over %v with %d busy processes: %d false curator elections (a curator took the lead), %d curator leases lost, %.0f etcd leader changes; Management probes: %v",
		time.Since(start).Round(time.Second), *burnersFlag, leads, lost, etcdChanges, probes)

	s.killLeader(t, c, p)
}

// metric reads node n's metric name (summed over its labels, a counter's
// or a gauge's) through cairnctl node metrics.
func (s *suite) metric(t *testing.T, c *cluster.Cluster, n *cluster.Node, name string) float64 {
	t.Helper()
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(strings.NewReader(s.cairnctl(t, c, "node", "metrics", n.ID())))
	if err != nil {
		t.Fatalf("%s's metrics: %v", n.Name(), err)
	}
	mf, ok := families[name]
	if !ok {
		t.Fatalf("%s's metrics lack %s", n.Name(), name)
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}
