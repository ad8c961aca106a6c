//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
	"cairn.dev/cairn/test/launch/l2switch"
)

// chaosProfile is the network of TestNetworkChaos, unless
// CAIRN_NET_CHAOS names another: every link between two nodes, and
// between a node and the host side, delays each frame by 50 ms ± 20 ms,
// loses 2 % of them and duplicates and reorders 0.5 %. The seed is new in
// every run, and logged.
const chaosProfile = "delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%"

// partitionFor is how long TestNetworkChaos cuts a node off, at least.
const partitionFor = 30 * time.Second

// TestNetworkChaos runs a three-node cluster on an impaired network, the
// harness's switch between the nodes (test/launch/l2switch), one cluster
// through every step, in order:
//
//	(a) node 0 bootstraps, nodes 1 and 2 register, are approved, commit;
//	(b) nodes 1 and 2 become ConsensusMember: a 3-member etcd;
//	(p) a member that does not lead is cut off from every other node and
//	    the host for 30 s: Management keeps answering through the
//	    others, the cut node is HEARTBEAT_TIMEOUT, and once the
//	    partition heals it is HEALTHY again by itself, without a reboot,
//	    and its curator answers;
//	(c) with -long: every node reboots in turn and joins again, while
//	    Management calls keep being answered.
//
// The harness logs the profile with the seed it picked: given back as
// CAIRN_NET_CHAOS, it replays the network's decisions.
// CAIRN_NET_CHAOS=delay=0 runs the same steps on the switch without
// impairment, for the figures of a clean run.
func TestNetworkChaos(t *testing.T) {
	deadline := 25 * time.Minute
	if *longFlag {
		deadline = 45 * time.Minute
	}
	s := newSuite(t, 3, deadline)
	profile, err := l2switch.ParseProfile(chaosProfile)
	if env := os.Getenv(cluster.NetChaosEnv); env != "" {
		profile, err = l2switch.ParseProfile(env)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := s.newSwitchedCluster(3, profile)
	nodes := c.Nodes()

	var o *owner
	t.Run("a-three-nodes-form", func(t *testing.T) {
		if err := c.Form(s.ctx); err != nil {
			t.Fatalf("forming the cluster: %v", err)
		}
		for _, p := range c.Phases() {
			s.step(p.Name, p.Duration)
		}
		o = readOwner(t, c.ConfigDir())
	})
	if o == nil {
		t.Fatal("no owner: the cluster did not form")
	}

	t.Run("b-consensus-members", func(t *testing.T) {
		s.addConsensusMembers(t, c, nodes[1:])
	})

	p := startProber(t, c, o)
	t.Run("p-partition", func(t *testing.T) {
		s.partition(t, c, p, o)
	})

	if *longFlag {
		t.Run("c-rolling-reboot", func(t *testing.T) {
			for i, n := range nodes {
				s.rebootMember(t, c, p, n, (i+1)%len(nodes), false)
			}
		})
	}
	for _, n := range nodes {
		if vm := n.VM(); vm != nil {
			assertNoPanic(t, vm)
		}
	}
}

// partition cuts a member that does not lead off for partitionFor, and
// until it is HEARTBEAT_TIMEOUT, checks that the cluster serves through
// the others meanwhile, heals the partition and waits for the node to be
// HEALTHY and its curator to answer again.
func (s *suite) partition(t *testing.T, c *cluster.Cluster, p *prober, o *owner) {
	nodes := c.Nodes()
	lead, _ := leader(c)
	cut, via := nodes[2], nodes[0]
	if lead == cut {
		cut = nodes[1]
	}
	if lead != nil && lead != cut {
		via = lead
	}
	if _, err := p.waitOK(s.ctxWithin(2*time.Minute), time.Now()); err != nil {
		t.Fatalf("the cluster does not serve before the partition: %v", err)
	}
	mark := cut.Mark()
	start := time.Now()
	if err := c.Network().Partition(cut.Index()); err != nil {
		t.Fatal(err)
	}
	healed := false
	heal := func() time.Time {
		if !healed {
			c.Network().Heal()
			healed = true
		}
		return time.Now()
	}
	// A failing step must not leave the node cut off for the next.
	defer heal()
	t.Logf("cut %s (%s) off; %s leads", cut.Name(), cut.ID(), nameOf(lead))

	timedOut := s.waitHealth(t, c, cut, "HEARTBEAT_TIMEOUT", 3*time.Minute)
	s.step("partition → "+cut.Name()+" HEARTBEAT_TIMEOUT", timedOut.Sub(start))
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	out, err := c.CairnctlVia(ctx, via.Index(), "node", "list", "-o", "json")
	cancel()
	if err != nil {
		t.Errorf("cairnctl node list through %s while %s is cut off: %v", via.Name(), cut.Name(), err)
	} else if list, err := cluster.ParseNodeList(out); err != nil {
		t.Error(err)
	} else {
		for _, n := range list {
			t.Logf("while %s is cut off: %s is %s, %s", cut.Name(), n.ID, n.State, n.Health)
		}
	}

	select {
	case <-time.After(time.Until(start.Add(partitionFor))):
	case <-s.ctx.Done():
		t.Fatalf("the suite's deadline passed during the partition")
	}
	healAt := heal()
	st := p.between(start, healAt)
	s.step("partition: longest Management outage", st.longest)
	t.Logf("Management calls during the %v partition: %v (last error: %v)", healAt.Sub(start).Round(time.Second), st, st.lastErr)
	if st.ok == 0 {
		t.Errorf("no Management call succeeded while %s was cut off", cut.Name())
	}

	healthy := s.waitHealth(t, c, cut, "HEALTHY", 5*time.Minute)
	s.step("heal → "+cut.Name()+" HEALTHY", healthy.Sub(healAt))
	answered := s.waitCurator(t, cut, o, 5*time.Minute)
	s.step("heal → "+cut.Name()+"'s curator answers", answered.Sub(healAt))
	if l, ok := cut.VM().Console().Find(mark, launch.CairnBoot.Init); ok || !cut.Running() {
		t.Errorf("%s rebooted or stopped while cut off (%q), want it back by itself", cut.Name(), l.Text)
	}
}

// waitCurator calls Management.GetNodes on n's own curator until it
// answers, and returns when it first did. Each call dials anew, so that
// the time measures the node, not gRPC's backoff between the attempts of
// one connection.
func (s *suite) waitCurator(t *testing.T, n *cluster.Node, o *owner, timeout time.Duration) time.Time {
	t.Helper()
	creds := o.creds(t)
	ctx := s.ctxWithin(timeout)
	for calls := 1; ; calls++ {
		cc, err := dialOnce(n.CuratorAddr(), creds)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = api.NewManagementClient(cc).GetNodes(cctx, &api.GetNodesRequest{})
		cancel()
		cc.Close()
		if err == nil {
			t.Logf("%s's curator answered GetNodes at call %d", n.Name(), calls)
			return time.Now()
		}
		t.Logf("%s's curator, call %d: %v", n.Name(), calls, err)
		select {
		case <-ctx.Done():
			t.Fatalf("%s's curator does not answer GetNodes within %v: %v", n.Name(), timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func nameOf(n *cluster.Node) string {
	if n == nil {
		return "no node"
	}
	return n.Name()
}

// newSwitchedCluster is newCluster's cluster with its nodes on the
// harness's switch, impaired as profile says.
func (s *suite) newSwitchedCluster(nodes int, profile l2switch.Profile) *cluster.Cluster {
	s.t.Helper()
	logDir := filepath.Join(repoRoot(s.t), "out", "e2e")
	c, err := cluster.New(cluster.Config{
		Nodes:         nodes,
		Image:         artifact(s.t, "cairn.img"),
		Cairnctl:      cairnctlPath(s.t),
		Dir:           s.t.TempDir(),
		ConsoleDir:    logDir,
		ConsolePrefix: strings.ReplaceAll(s.t.Name(), "/", "_") + "_",
		MemoryMiB:     *memoryFlag,
		TPM:           true,
		Logf:          s.t.Logf,
		Switch:        &profile,
	})
	if err != nil {
		s.t.Fatalf("making the cluster: %v", err)
	}
	s.t.Cleanup(func() {
		if s.t.Failed() {
			for _, n := range c.Nodes() {
				if vm := n.VM(); vm != nil {
					s.consoleOnFailure(n.Name(), vm)
				}
			}
		}
		if err := c.Close(); err != nil {
			s.t.Errorf("closing the cluster: %v", err)
		}
	})
	return c
}
