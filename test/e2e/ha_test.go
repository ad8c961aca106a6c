//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestHACluster is the three-node cluster of issue 7, one cluster through
// every step, in order:
//
//	(a) node 0 bootstraps while nodes 1 and 2 boot without parameters
//	    and wait; given a parameters disk while they run (node 1 a
//	    virtio disk, node 2 a USB stick), they register, are approved,
//	    commit;
//	(h) nodes 1 and 2 registered at the same moment, and so do two nodes
//	    the test plays over the API: all succeed;
//	(f) a node with a wrong register ticket is refused and says why;
//	(b) nodes 1 and 2 become ConsensusMember: a 3-member etcd;
//	(i) the authorization matrix through a follower and the leader, with
//	    a worker-only and a decommissioned node among its callers;
//	then the owner writes state (roles, a rotated ticket, a new node)
//	that (c), (d) and (e) must each leave intact;
//	(c) node 2 reboots by kexec and joins again, while Management calls
//	    keep being answered; with -long every node reboots in turn, one
//	    through the firmware;
//	(d) the curator leader's VM is killed: another node leads, cairnctl
//	    with its stored endpoints answers again, the killed node is
//	    HEARTBEAT_TIMEOUT until it boots again, joins and is HEALTHY;
//	(e) all three power off and boot again at once: the cluster comes
//	    back by itself;
//	(g) node 2 loses the ConsensusMember role: its etcd member and
//	    curator stop, and the cluster directory shrinks to two.
func TestHACluster(t *testing.T) {
	s := newSuite(t, 3, 35*time.Minute)
	cfg := s.clusterConfig(3, 1)
	cfg.EarlyBoot = true
	// Node 2's parameters disk is a USB stick, node 1's a virtio disk.
	cfg.StickNodes = []int{2}
	c := s.startCluster(cfg)
	nodes := c.Nodes()
	wrongTicketNode := c.Node(3)

	var o *owner
	t.Run("a-three-nodes-form", func(t *testing.T) {
		if err := c.Form(s.ctx); err != nil {
			t.Fatalf("forming the cluster: %v", err)
		}
		for _, p := range c.Phases() {
			s.step(p.Name, p.Duration)
		}
		list, err := c.ListNodes(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if !hasNode(list, n.ID(), "UP") {
				t.Errorf("%s (%s) is not UP in the node list %+v", n.Name(), n.ID(), list)
			}
		}
		// Nodes 1 and 2 waited for parameters, then found them on the
		// disk plugged in, and only then registered; node 2's on the
		// stick, a SCSI disk once its USB driver loaded.
		for _, n := range nodes[1:] {
			con := n.VM().Console()
			waiting, ok := con.Find(0, launch.Mark(marker.WaitingForParameters))
			if !ok {
				t.Errorf("%s never said it waits for parameters", n.Name())
				continue
			}
			found, ok := con.Find(0, launch.Mark(marker.ParametersFound))
			registering, ok2 := con.Find(0, launch.Mark(marker.Registering))
			if !ok || !ok2 || found.Time.Before(waiting.Time) || registering.Time.Before(found.Time) {
				t.Errorf("%s: waiting for parameters at %v, found them at %v (%v), registering at %v (%v): want them in that order",
					n.Name(), waiting.Time, found.Time, ok, registering.Time, ok2)
				continue
			}
			wantSource := "source=vd"
			if n == nodes[2] {
				wantSource = "source=sd"
			}
			if !strings.Contains(found.Text, wantSource) {
				t.Errorf("%s found its parameters as %q, want %s…", n.Name(), found.Text, wantSource)
			}
			s.step(n.Name()+": parameters disk found → registering", registering.Time.Sub(found.Time))
		}
		o = readOwner(t, c.ConfigDir())
	})
	if o == nil {
		t.Fatal("no owner: the cluster did not form")
	}

	// The node with a wrong ticket boots now, so that its refusal is due
	// by the time (f) looks.
	wrongTicket := s.bootWrongTicket(t, c, wrongTicketNode)

	t.Run("h-concurrent-registration", func(t *testing.T) {
		a := registeringLine(t, s, nodes[1])
		b := registeringLine(t, s, nodes[2])
		gap := a.Time.Sub(b.Time).Abs()
		s.step("nodes 1 and 2: gap between their RegisterNode calls", gap)
		if nodes[1].ID() == nodes[2].ID() {
			t.Errorf("nodes 1 and 2 share the ID %s", nodes[1].ID())
		}
		fakes := []*fakeNode{newFakeNode(t), newFakeNode(t)}
		took := enrolFakeNodes(s.ctx, t, nodes[0].CuratorAddr(), o, fakes...)
		s.step("two RegisterNode calls at the same moment (API)", took)
		// Decommissioned, a node is refused when it joins; deleted, it is
		// gone.
		for _, f := range fakes {
			s.cairnctl(t, c, "node", "decommission", f.id)
		}
		err := fakes[0].join(s.ctx, t, nodes[0].CuratorAddr(), o.caDER)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "decommission") {
			t.Errorf("JoinNode of decommissioned %s = %v, want a refusal naming the decommission", fakes[0].id, err)
		}
		for _, f := range fakes {
			s.cairnctl(t, c, "node", "delete", f.id)
		}
		list, err := c.ListNodes(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fakes {
			if hasNode(list, f.id, "") {
				t.Errorf("deleted node %s is still listed: %+v", f.id, list)
			}
		}
	})

	t.Run("f-wrong-ticket", func(t *testing.T) {
		s.checkWrongTicket(t, c, wrongTicketNode, wrongTicket)
	})

	t.Run("b-consensus-members", func(t *testing.T) {
		s.addConsensusMembers(t, c, nodes[1:])
		list, err := c.ListNodes(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if !hasRole(list, n.ID(), "ConsensusMember") {
				t.Errorf("%s lacks ConsensusMember in %+v", n.Name(), list)
			}
		}
		s.checkDirectory(t, c, nodes, nil)
	})

	t.Run("i-authorization-through-a-follower", func(t *testing.T) {
		s.matrixThroughFollower(t, c, o)
	})

	p := startProber(t, c, o)
	// State written before the rolling reboot, the leader kill and the
	// cold restart, and checked after each.
	w := s.writeWitness(t, c, o)

	t.Run("c-rolling-reboot", func(t *testing.T) {
		if !*longFlag {
			// One member, by kexec, asked through another: every
			// member's reboot through the firmware, one at a time, is
			// TestUpdateRollout's, and this step's full round runs with
			// -long (make test-long).
			s.rebootMember(t, c, p, nodes[2], 0, false)
			s.checkWitness(t, c, o, w, "the reboot")
			return
		}
		for i, n := range nodes {
			via := (i + 1) % len(nodes)
			// One reboot goes through the firmware, as asked; the
			// others kexec.
			s.rebootMember(t, c, p, n, via, i == 1)
		}
		s.checkWitness(t, c, o, w, "the rolling reboot")
	})

	t.Run("d-leader-killed", func(t *testing.T) {
		s.killLeader(t, c, p)
		s.checkWitness(t, c, o, w, "the leader's death")
	})

	t.Run("e-cold-restart", func(t *testing.T) {
		s.coldRestart(t, c, p)
		s.checkWitness(t, c, o, w, "the cold restart")
	})

	t.Run("g-remove-consensus-member", func(t *testing.T) {
		n := nodes[2]
		var marks []int
		for _, m := range nodes {
			marks = append(marks, m.Mark())
		}
		start := time.Now()
		s.cairnctl(t, c, "node", "remove-role", n.ID(), "ConsensusMember")
		stopped := s.waitNode(t, n, marks[2], launch.Mark(marker.ConsensusStopped))
		s.step("node2: remove-role → consensus stopped", stopped.Time.Sub(start))
		for i, m := range nodes[:2] {
			shrunk := s.waitDirectory(t, c, i, nodes[:2])
			s.step(m.Name()+": remove-role → directory of 2", shrunk.Sub(start))
		}
		list, err := c.ListNodes(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !hasNode(list, n.ID(), "UP") || hasRole(list, n.ID(), "ConsensusMember") {
			t.Errorf("after remove-role, node list %+v: want %s UP without ConsensusMember", list, n.ID())
		}
		s.checkDirectory(t, c, nodes[:2], nodes[2:])
		if _, err := p.waitOK(s.ctxWithin(time.Minute), time.Now()); err != nil {
			t.Errorf("the two remaining members do not serve: %v", err)
		}
		for i, m := range nodes[:2] {
			if l, ok := m.VM().Console().Find(marks[i], regexp.MustCompile(`removed member`)); ok {
				t.Logf("%s: %s", m.Name(), cluster.Message(l.Text))
			}
		}
		if !n.Running() {
			t.Errorf("node2 stopped after losing its role")
		}
	})
	for _, n := range nodes {
		if vm := n.VM(); vm != nil {
			assertNoPanic(t, vm)
		}
	}
}

// addConsensusMembers gives each of nodes the ConsensusMember role in
// turn, and times until its etcd member votes and its curator serves.
func (s *suite) addConsensusMembers(t *testing.T, c *cluster.Cluster, nodes []*cluster.Node) {
	t.Helper()
	for _, n := range nodes {
		mark, start := n.Mark(), time.Now()
		s.cairnctl(t, c, "node", "add-role", n.ID(), "ConsensusMember")
		voting := s.waitNode(t, n, mark, launch.Mark(marker.ConsensusRunning, "voting", "true"))
		serving := s.waitNode(t, n, mark, launch.Mark(marker.CuratorServing))
		s.step(n.Name()+": add-role → etcd voting member", voting.Time.Sub(start))
		s.step(n.Name()+": add-role → curator serving", serving.Time.Sub(start))
	}
}

// hasNode reports whether the list holds id, in state (any state if "").
func hasNode(list []cluster.NodeInfo, id, state string) bool {
	for _, n := range list {
		if n.ID == id && (state == "" || n.State == state) {
			return true
		}
	}
	return false
}

// hasRole reports whether the list holds id with role.
func hasRole(list []cluster.NodeInfo, id, role string) bool {
	for _, n := range list {
		if n.ID == id {
			return n.HasRole(role)
		}
	}
	return false
}

// checkDirectory checks that cairnctl cluster info lists in and not out
// in the cluster directory.
func (s *suite) checkDirectory(t *testing.T, c *cluster.Cluster, in, out []*cluster.Node) {
	t.Helper()
	info := s.cairnctl(t, c, "cluster", "info", "-o", "json")
	for _, n := range in {
		if !strings.Contains(info, n.ID()) {
			t.Errorf("cluster info lacks %s (%s):\n%s", n.Name(), n.ID(), info)
		}
	}
	for _, n := range out {
		if strings.Contains(info, n.ID()) {
			t.Errorf("cluster info still lists %s (%s):\n%s", n.Name(), n.ID(), info)
		}
	}
}

// registeringLine returns the first line on which n states that it
// registers (marker.Registering).
func registeringLine(t *testing.T, s *suite, n *cluster.Node) launch.Line {
	t.Helper()
	return s.waitNode(t, n, 0, launch.Mark(marker.Registering, "node", n.ID()))
}

// waitDirectory asks the curator of node via for the cluster directory
// (cairnctl cluster info) until it lists exactly the nodes want, and
// returns when it first did.
func (s *suite) waitDirectory(t *testing.T, c *cluster.Cluster, via int, want []*cluster.Node) time.Time {
	t.Helper()
	var wantIDs []string
	for _, n := range want {
		wantIDs = append(wantIDs, n.ID())
	}
	slices.Sort(wantIDs)
	ctx := s.ctxWithin(3 * time.Minute)
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := c.CairnctlVia(actx, via, "cluster", "info", "-o", "json")
		cancel()
		var info struct {
			Directory []struct {
				ID string `json:"id"`
			} `json:"directory"`
		}
		if err == nil {
			err = json.Unmarshal(out, &info)
		}
		if err == nil {
			var got []string
			for _, e := range info.Directory {
				got = append(got, e.ID)
			}
			slices.Sort(got)
			if slices.Equal(got, wantIDs) {
				return time.Now()
			}
			err = fmt.Errorf("the directory lists %v, want %v", got, wantIDs)
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("cluster info through node %d: %v", via, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// bootWrongTicket boots n with the cluster's register parameters, except
// for a ticket of random bytes, and returns that ticket.
func (s *suite) bootWrongTicket(t *testing.T, c *cluster.Cluster, n *cluster.Node) []byte {
	t.Helper()
	good, err := c.RegisterParams(s.ctx)
	if err != nil {
		t.Fatalf("register parameters: %v", err)
	}
	var params api.NodeParameters
	if err := proto.Unmarshal(good, &params); err != nil {
		t.Fatalf("cairnctl's register parameters do not parse: %v", err)
	}
	reg := params.GetClusterRegister()
	if reg == nil {
		t.Fatalf("cairnctl params register wrote no ClusterRegister: %v", &params)
	}
	wrong := make([]byte, max(len(reg.GetRegisterTicket()), 16))
	rand.Read(wrong)
	reg.RegisterTicket = wrong
	bad, err := proto.Marshal(&params)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Boot(s.ctx, bad); err != nil {
		t.Fatalf("booting %s with a wrong ticket: %v", n.Name(), err)
	}
	return wrong
}

// checkWrongTicket waits for the node with a wrong ticket to be refused,
// checks that it says why and that the cluster does not list it, and
// stops it.
func (s *suite) checkWrongTicket(t *testing.T, c *cluster.Cluster, n *cluster.Node, ticket []byte) {
	refused := s.waitNode(t, n, 0, launch.Mark(marker.Refused))
	m, _ := refused.Marker()
	reason := m.Get("reason")
	t.Logf("%s: refused: %s", n.Name(), reason)
	s.waitErrorEntry(t, n, refused)
	if !strings.Contains(strings.ToLower(reason), "ticket") {
		t.Errorf("the refusal %q does not say that the ticket is wrong", reason)
	}
	init, _ := n.VM().Console().Find(0, launch.CairnBoot.Init)
	s.step("wrong ticket: /init → refused", refused.Time.Sub(init.Time))
	list, err := c.ListNodes(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id := n.ID(); id != "" && hasNode(list, id, "") {
		t.Errorf("the node with a wrong ticket (%s) is listed: %+v", id, list)
	}
	if _, ok := n.VM().Console().Find(0, launch.Mark(marker.WaitingForApproval)); ok {
		t.Errorf("the node with a wrong ticket went on to wait for approval")
	}
	assertNoPanic(t, n.VM())
	if err := n.Kill(); err != nil {
		t.Errorf("stopping %s: %v", n.Name(), err)
	}
}

// rebootWithin bounds a member's reboot, from the command to its curator
// serving again: about 90 s on this project's loaded test machine.
const rebootWithin = 8 * time.Minute

// rebootMember reboots n with cairnctl through node via (through the
// firmware if firmware is set, else with kexec), waits for it to join
// again and serve, and checks that the cluster answered while n was away.
func (s *suite) rebootMember(t *testing.T, c *cluster.Cluster, p *prober, n *cluster.Node, via int, firmware bool) {
	t.Helper()
	mark, start := n.Mark(), time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	args := []string{"node", "reboot", n.ID()}
	name := n.Name()
	if firmware {
		args = append(args, "--firmware")
		name += " (through the firmware)"
	}
	_, err := c.CairnctlVia(ctx, via, args...)
	cancel()
	if err != nil {
		s.fatalf(t, "rebooting %s: %v", n.Name(), err)
	}
	// A node back within minutes on a loaded machine; one that is not
	// fails the step then, not at the suite's deadline.
	within := s.ctxWithin(rebootWithin)
	down := s.waitNodeCtx(within, t, n, mark, launch.Substring("cairn: stopping for reboot"))
	boot := s.waitNodeCtx(within, t, n, mark, launch.CairnBoot.Init)
	// Through a curator, or, when none answered within the node's
	// patience (a loaded machine, the leader just gone), from its sealed
	// configuration: either way its etcd rejoins the others'.
	joined := s.waitNodeCtx(within, t, n, boot.Index, launch.Mark(marker.Joined, "node", n.ID()))
	if m, ok := joined.Marker(); ok && m.Get("via") != "curator" {
		t.Logf("%s joined via %s, not through a curator", n.Name(), m.Get("via"))
	}
	voting := s.waitNodeCtx(within, t, n, joined.Index, launch.Mark(marker.ConsensusRunning, "voting", "true"))
	serving := s.waitNodeCtx(within, t, n, joined.Index, launch.Mark(marker.CuratorServing))
	if _, kexec := n.VM().Console().Find(mark, kexecLine); kexec == firmware {
		t.Errorf("%s: asked to reboot through the firmware: %v, but its last line before the reboot was: %s",
			n.Name(), firmware, s.lineAfter(n, mark, "cairn: rebooting"))
	}
	s.step(name+": reboot → joined", joined.Time.Sub(start))
	s.step(name+": reboot → etcd voting again", voting.Time.Sub(start))
	s.step(name+": reboot → curator serving", serving.Time.Sub(start))
	st := p.between(start, serving.Time)
	s.step(name+" reboot: longest Management outage", st.longest)
	t.Logf("%s reboot: Management calls: %v (last error: %v)", n.Name(), st, st.lastErr)
	if away := p.between(down.Time, joined.Time); away.ok == 0 {
		t.Errorf("no Management call succeeded while %s was away (%s → %s): %v, last error %v",
			n.Name(), down.Time.Format("15:04:05"), joined.Time.Format("15:04:05"), away, away.lastErr)
	}
}

// leadsLine matches the line of a curator that took the lead.
var leadsLine = launch.Mark(marker.CuratorLeading)

// leader returns the node that most recently said it leads.
func leader(c *cluster.Cluster) (*cluster.Node, launch.Line) {
	var best *cluster.Node
	var bestLine launch.Line
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		lines := n.VM().Console().Lines()
		for i := len(lines) - 1; i >= 0; i-- {
			if leadsLine.MatchString(lines[i].Text) {
				if best == nil || lines[i].Time.After(bestLine.Time) {
					best, bestLine = n, lines[i]
				}
				break
			}
		}
	}
	return best, bestLine
}

// killLeader kills the curator leader's VM, measures how long the others
// take to elect a new leader and serve, and boots the killed node again.
func (s *suite) killLeader(t *testing.T, c *cluster.Cluster, p *prober) {
	old, _ := leader(c)
	if old == nil {
		t.Fatal("no node says it leads")
	}
	if _, err := p.waitOK(s.ctxWithin(2*time.Minute), time.Now()); err != nil {
		t.Fatalf("the cluster does not serve before the kill: %v", err)
	}
	marks := map[*cluster.Node]int{}
	for _, n := range c.Nodes() {
		marks[n] = n.Mark()
	}
	// cairnctl as an operator runs it: only the configuration directory,
	// whose endpoints are every curator's (the killed one's among them).
	if err := c.StoreNodeEndpoints(s.ctxWithin(2 * time.Minute)); err != nil {
		t.Fatalf("storing the endpoints: %v", err)
	}
	t.Logf("killing %s (%s), the curator leader", old.Name(), old.ID())
	kill := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatalf("killing %s: %v", old.Name(), err)
	}
	listed := make(chan storedList, 1)
	go func() { listed <- firstStoredList(s.ctxWithin(3*time.Minute), c) }()
	var next *cluster.Node
	var leads launch.Line
	ctx := s.ctxWithin(3 * time.Minute)
	for next == nil {
		for _, n := range c.Nodes() {
			if n == old {
				continue
			}
			if l, ok := n.VM().Console().Find(marks[n], leadsLine); ok {
				next, leads = n, l
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no other node took the lead within 3 minutes of the kill")
		case <-time.After(200 * time.Millisecond):
		}
	}
	served, err := p.waitOK(ctx, kill)
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	s.step("leader killed → new leader ("+next.Name()+")", leads.Time.Sub(kill))
	s.step("leader killed → Management served again", served.Sub(kill))
	t.Logf("new leader %s; Management calls after the kill: %v", next.Name(), p.between(kill, served))
	first := <-listed
	if first.err != nil {
		t.Fatalf("cairnctl node list with the stored endpoints never succeeded after the kill (%d runs): %v", first.runs, first.err)
	}
	s.step("leader killed → first cairnctl node list (stored endpoints)", first.at.Sub(kill))
	t.Logf("cairnctl node list with the stored endpoints: first success after %d run(s), %v after the kill", first.runs, first.at.Sub(kill).Round(time.Millisecond))

	// The dead node is reported so until it comes back.
	timedOut := s.waitHealth(t, c, old, "HEARTBEAT_TIMEOUT", 3*time.Minute)
	s.step("leader killed → "+old.Name()+" HEARTBEAT_TIMEOUT", timedOut.Sub(kill))
	// The live nodes found the new leader in time: their beats to the
	// dead one gave up early enough (roleserve's beatTimeout).
	live := map[string]string{}
	for _, n := range c.Nodes() {
		if n != old {
			live[n.ID()] = n.Name()
		}
	}
	if list, err := c.ListNodes(s.ctxWithin(time.Minute)); err == nil {
		for _, n := range list {
			t.Logf("when %s timed out: %s is %s, last heartbeat %v", old.Name(), n.ID, n.Health, n.Raw["last_heartbeat"])
			if name, ok := live[n.ID]; ok && n.Health == "HEARTBEAT_TIMEOUT" {
				t.Errorf("%s, alive, was reported HEARTBEAT_TIMEOUT as well when %s was", name, old.Name())
			}
		}
	}

	if n := s.nodeInfo(t, c, old); n.Health != "HEARTBEAT_TIMEOUT" {
		t.Errorf("%s, still dead, is %q before its relaunch, want HEARTBEAT_TIMEOUT", old.Name(), n.Health)
	} else {
		t.Logf("%s before its relaunch: %s, last heartbeat %v", old.Name(), n.Health, n.Raw["last_heartbeat"])
	}
	restart := time.Now()
	if _, err := old.Boot(s.ctx, nil); err != nil {
		t.Fatalf("booting %s again: %v", old.Name(), err)
	}
	// The others lead and serve by now: it joins through them, not cold.
	within := s.ctxWithin(rebootWithin)
	joined := s.waitNodeCtx(within, t, old, 0, launch.Mark(marker.Joined, "node", old.ID(), "via", "curator"))
	serving := s.waitNodeCtx(within, t, old, joined.Index, launch.Mark(marker.CuratorServing))
	s.step(old.Name()+": relaunch after kill → joined", joined.Time.Sub(restart))
	s.step(old.Name()+": relaunch after kill → curator serving", serving.Time.Sub(restart))
	if err := c.WaitAllUp(s.ctx, 3*time.Minute); err != nil {
		t.Errorf("after %s came back: %v", old.Name(), err)
	}
	healthy := s.waitHealth(t, c, old, "HEALTHY", 3*time.Minute)
	s.step(old.Name()+": relaunch after kill → HEALTHY", healthy.Sub(restart))
}

// storedList is the first successful `cairnctl node list` of
// firstStoredList.
type storedList struct {
	at   time.Time
	runs int
	err  error
}

// firstStoredList runs `cairnctl node list` with nothing but the
// cluster's configuration directory, again as soon as a run fails, until
// one succeeds or ctx ends, and says when the first succeeded.
func firstStoredList(ctx context.Context, c *cluster.Cluster) storedList {
	var last error
	for runs := 1; ; runs++ {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := c.CairnctlStored(rctx, "node", "list", "-o", "json")
		cancel()
		if err == nil {
			return storedList{at: time.Now(), runs: runs}
		}
		last = err
		select {
		case <-ctx.Done():
			return storedList{runs: runs, err: last}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeInfo returns n as cairnctl node list shows it.
func (s *suite) nodeInfo(t *testing.T, c *cluster.Cluster, n *cluster.Node) cluster.NodeInfo {
	t.Helper()
	list, err := c.ListNodes(s.ctxWithin(2 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range list {
		if info.ID == n.ID() {
			return info
		}
	}
	t.Fatalf("%s (%s) is not in the node list %+v", n.Name(), n.ID(), list)
	return cluster.NodeInfo{}
}

// waitHealth polls cairnctl node list until it shows n with health want,
// and returns when it first did.
func (s *suite) waitHealth(t *testing.T, c *cluster.Cluster, n *cluster.Node, want string, timeout time.Duration) time.Time {
	t.Helper()
	ctx := s.ctxWithin(timeout)
	got := ""
	for {
		list, err := c.ListNodes(ctx)
		for _, info := range list {
			if info.ID == n.ID() {
				got = info.Health
			}
		}
		if err == nil && got == want {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s is %q, not %s, %v on (last error: %v)", n.Name(), got, want, timeout, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// coldRestart powers every node off, boots them all again at once and
// measures how long the cluster takes to serve.
func (s *suite) coldRestart(t *testing.T, c *cluster.Cluster, p *prober) {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes()))
	for i, n := range c.Nodes() {
		wg.Go(func() { errs[i] = n.PowerOff(s.ctx, 2*time.Minute) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("power-off for the cold restart: %v", err)
		}
	}
	start := time.Now()
	for _, n := range c.Nodes() {
		if _, err := n.Boot(s.ctx, nil); err != nil {
			t.Fatalf("booting %s: %v", n.Name(), err)
		}
	}
	for _, n := range c.Nodes() {
		// Through a curator or from a cold start, whichever came first.
		l := s.waitNode(t, n, 0, launch.Mark(marker.Joined, "node", n.ID()))
		t.Logf("%s: %s", n.Name(), cluster.Message(l.Text))
		serving := s.waitNode(t, n, l.Index, launch.Mark(marker.CuratorServing))
		s.step(n.Name()+": cold restart → curator serving", serving.Time.Sub(start))
	}
	served, err := p.waitOK(s.ctxWithin(5*time.Minute), start)
	if err != nil {
		t.Fatalf("after the cold restart: %v", err)
	}
	s.step("cold restart: launch → Management served", served.Sub(start))
	if err := c.WaitAllUp(s.ctx, 3*time.Minute); err != nil {
		t.Errorf("after the cold restart: %v", err)
	}
}

// join calls JoinNode for the fake node, proving its join key.
func (f *fakeNode) join(ctx context.Context, t *testing.T, addr string, caDER []byte) error {
	creds, err := rpc.EphemeralCredentials(caDER, f.joinKey)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = api.NewCuratorClient(dial(t, addr, creds)).JoinNode(ctx, &api.JoinNodeRequest{NodeId: f.id})
	if err != nil {
		return fmt.Errorf("JoinNode(%s): %w", f.id, err)
	}
	return nil
}

// matrixThroughFollower runs the authorization matrix against a curator
// that follows (its calls are forwarded to the leader) and against the
// leader, with two more callers: an UP worker-only node, whose
// certificate is the matrix's node column, and a decommissioned node,
// whose certificate is still valid but no longer honoured.
func (s *suite) matrixThroughFollower(t *testing.T, c *cluster.Cluster, o *owner) {
	lead, _ := leader(c)
	if lead == nil {
		t.Fatal("no curator has said it leads")
	}
	var follower *cluster.Node
	for _, n := range c.Nodes() {
		if n != lead {
			follower = n
			break
		}
	}
	worker, gone := newFakeNode(t), newFakeNode(t)
	enrolFakeNodes(s.ctx, t, lead.CuratorAddr(), o, worker, gone)
	s.cairnctl(t, c, "node", "add-role", worker.id, "KubernetesWorker")
	s.cairnctl(t, c, "node", "decommission", gone.id)
	decommissioned := matrixCaller{name: "decommissioned", creds: rpc.NodeCredentials(gone.node), kind: identity.PeerNode, revoked: true}
	start := time.Now()
	runAuthzMatrix(s.ctx, t, follower, o, worker, decommissioned)
	s.step("authorization matrix through a follower", time.Since(start))
	runAuthzMatrix(s.ctx, t, lead, o, worker, decommissioned)
	// The fake nodes never beat: they leave, so that later steps see only
	// the cluster's own nodes.
	s.cairnctl(t, c, "node", "decommission", worker.id)
	for _, f := range []*fakeNode{worker, gone} {
		s.cairnctl(t, c, "node", "delete", f.id)
	}
}
