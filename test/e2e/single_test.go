//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
	"cairn.dev/cairn/test/launch/netns"
)

// bootstrapMilestones are the console lines that end the phases of a
// bootstrapping node's boot, up to its curator serving: /init's console
// protocol, then the node's markers. The two etcd rows read the log lines
// of node/consensus, as node/marker has no marker for etcd's own start;
// they only time the table, and Milestones reports them missing rather
// than failing.
var bootstrapMilestones = []cluster.Milestone{
	{Name: "qemu start → /init started", Line: launch.CairnBoot.Init},
	{Name: "qemu start → enrolment bootstrapping", Line: launch.Mark(marker.Bootstrapping)},
	{Name: "qemu start → data partition mounted, etcd starting", Line: launch.Mark(marker.EtcdStarting)},
	{Name: "qemu start → etcd running (consensus ready)", Line: launch.Mark(marker.EtcdRunning)},
	{Name: "qemu start → cluster bootstrapped", Line: launch.Mark(marker.Bootstrapped)},
	{Name: "qemu start → curator leader", Line: launch.Mark(marker.CuratorLeading)},
	{Name: "qemu start → curator serving", Line: launch.Mark(marker.CuratorServing)},
}

// stepBootstrap records, as steps, the phases of node 0's bootstrapping
// boot that vm's console shows (bootstrapMilestones), and logs those it
// lacks.
func (s *suite) stepBootstrap(t *testing.T, vm *launch.Node) {
	t.Helper()
	phases, missing := cluster.Milestones(vm, 0, bootstrapMilestones)
	for _, p := range phases {
		s.step("node 0: "+p.Name, p.Duration)
	}
	if len(missing) > 0 {
		t.Logf("node 0's console lacks the milestones %q", missing)
	}
}

// singleNodeMemoryMiB is the memory of TestSingleNodeCluster's VMs: the
// least a one-node cluster is meant to work in.
const singleNodeMemoryMiB = 512

// TestSingleNodeCluster is the one-node cluster of issue 6, in a VM of
// singleNodeMemoryMiB, in order:
//
//	(a) a node bootstraps with parameters that cairnctl wrote; the real
//	    cairnctl takes ownership, lists the node UP with ConsensusMember,
//	    and reads and follows its logs;
//	(b) every RPC is called with no certificate, certificates of a
//	    foreign CA, a node certificate (of a node the test registers,
//	    approves and commits) and the owner certificate;
//	(c) cairnctl reboots the node; it comes back from its sealed
//	    configuration, and the cluster's data and the owner certificate
//	    are still good;
//	(d) a second node, given garbage as node parameters, says so and
//	    backs off without rebooting (it boots at the start, beside the
//	    others);
//	(e) the owner powers the node off through NodeManagement.Poweroff.
func TestSingleNodeCluster(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	// A one-node cluster must work in a VM of 512 MiB; this suite is it.
	cfg := s.clusterConfig(1, 1)
	cfg.MemoryMiB = singleNodeMemoryMiB
	c := s.startCluster(cfg)
	n0, garbageNode := c.Node(0), c.Node(1)

	garbage := make([]byte, 512)
	rand.Read(garbage)
	if _, err := garbageNode.Boot(s.ctx, garbage); err != nil {
		t.Fatalf("booting the node with garbage parameters: %v", err)
	}

	var o *owner
	var fake *fakeNode
	t.Run("a-bootstrap-and-own", func(t *testing.T) {
		if err := c.Form(s.ctx); err != nil {
			t.Fatalf("forming the one-node cluster: %v", err)
		}
		for _, p := range c.Phases() {
			s.step(p.Name, p.Duration)
		}
		phases, missing := cluster.Milestones(n0.VM(), 0, bootstrapMilestones)
		for _, p := range phases {
			s.step("node 0: "+p.Name, p.Duration)
		}
		if len(missing) > 0 {
			t.Logf("node 0's console lacks the milestones %q", missing)
		}
		id := n0.ID()
		nodes, err := c.ListNodes(s.ctx)
		if err != nil {
			t.Fatalf("node list: %v", err)
		}
		if len(nodes) != 1 || nodes[0].ID != id || nodes[0].State != "UP" || !nodes[0].HasRole("ConsensusMember") {
			t.Errorf("node list = %+v, want only %s, UP with ConsensusMember", nodes, id)
		}
		t.Logf("cairnctl cluster info:\n%s", s.cairnctl(t, c, "cluster", "info"))
		s.checkClock(t, c, n0)
		// The node has a TPM (swtpm): its configuration must be sealed
		// by it, not stored in the clear.
		if _, ok := n0.VM().Console().Find(0, launch.Mark(marker.ConfigurationSealed, "tpm", "true")); !ok {
			t.Errorf("node 0 did not seal its configuration with its TPM")
		}
		o = readOwner(t, c.ConfigDir())
		s.checkLogs(t, c, n0)
		// The node reports its memory and processes, /init (PID 1) and
		// its core, with etcd and the curator in it, among them, each
		// by its name.
		res := s.cairnctl(t, c, "node", "resources", id)
		t.Logf("cairnctl node resources:\n%s", res)
		if !strings.Contains(res, "Memory: ") || !strings.Contains(res, " init\n") || !strings.Contains(res, " cairn-core\n") {
			t.Errorf("node resources printed %q, want the memory line, /init and cairn-core", res)
		}
		s.checkMetrics(t, c, n0, o)
	})
	if o == nil {
		t.Fatal("no owner: the cluster did not form")
	}

	t.Run("b-authorization-matrix", func(t *testing.T) {
		fake = newFakeNode(t)
		enrolFakeNodes(s.ctx, t, n0.CuratorAddr(), o, fake)
		runAuthzMatrix(s.ctx, t, n0, o, fake)
	})

	t.Run("c-reboot-rejoin", func(t *testing.T) {
		s.rebootSingle(t, c, n0, o, fake)
	})

	t.Run("d-garbage-parameters", func(t *testing.T) {
		s.checkGarbageParameters(t, garbageNode)
	})

	t.Run("e-owner-powers-off", func(t *testing.T) {
		mgmt := api.NewNodeManagementClient(dial(t, n0.ManagementAddr(), o.creds(t)))
		// Fresh from its reboot, the node may not have heard the
		// cluster's owner key yet: it holds the call until it has, for
		// a while, and says Unavailable after that; retry then.
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := mgmt.Poweroff(s.ctx, &api.PoweroffRequest{})
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				t.Fatalf("Poweroff as the owner: %v", err)
			}
			t.Logf("Poweroff as the owner, retried: %v", err)
			time.Sleep(time.Second)
		}
		if err := n0.VM().Wait(s.ctxWithin(2 * time.Minute)); err != nil {
			t.Fatalf("the node did not power off by itself after Poweroff: %v", err)
		}
		if _, ok := n0.VM().Console().Find(0, launch.Substring("cairn: powering off")); !ok {
			t.Errorf("no %q line after Poweroff", "cairn: powering off")
		}
		assertNoPanic(t, n0.VM())
	})

	t.Run("f-raw-disk", func(t *testing.T) {
		checkRawDisk(t, n0.Disk(), n0.ID())
	})
}

// checkLogs reads the node's logs with cairnctl logs, then follows them
// with logs -f and waits for an entry that the node logs only after
// following began: the test gives the node a role, which its role server
// states (marker.Roles), and takes it away again.
func (s *suite) checkLogs(t *testing.T, c *cluster.Cluster, n *cluster.Node) {
	t.Helper()
	backlog := s.cairnctl(t, c, "logs", n.ID())
	bootstrapped := launch.Mark(marker.Bootstrapped, "node", n.ID())
	if countLines(backlog, bootstrapped) == 0 {
		t.Errorf("cairnctl logs %s lacks %v; it printed:\n%s", n.ID(), bootstrapped, tail(backlog, 20))
	}

	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"--config", c.ConfigDir(), "--endpoint", n.CuratorAddr(),
		"--node-endpoint", n.ID() + "=" + n.ManagementAddr()}, "logs", n.ID(), "-f")
	cmd := exec.CommandContext(ctx, c.Config().Cairnctl, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The backlog comes first; once it is through, change the roles.
	rolesLine := launch.Mark(marker.Roles)
	backlogRoles := countLines(backlog, rolesLine)
	seenRoles, poked := 0, false
	var start time.Time
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("cairnctl logs -f ended by itself: %v; stderr: %s", cmd.Wait(), stderr.String())
			}
			if !rolesLine.MatchString(l) {
				continue
			}
			if seenRoles++; seenRoles <= backlogRoles {
				continue
			}
			if !poked {
				t.Fatalf("cairnctl logs -f printed a role change the backlog did not have before the test changed roles: %s", l)
			}
			s.step("logs -f: add-role → its log entry streamed", time.Since(start))
			t.Logf("cairnctl logs -f streamed: %s", l)
			s.cairnctl(t, c, "node", "remove-role", n.ID(), "KubernetesWorker")
			return
		case <-time.After(3 * time.Second):
			if !poked {
				poked, start = true, time.Now()
				s.cairnctl(t, c, "node", "add-role", n.ID(), "KubernetesWorker")
			}
		case <-ctx.Done():
			t.Fatalf("cairnctl logs -f did not stream the role change within 3 minutes; stderr: %s", stderr.String())
		}
	}
}

// rebootSingle reboots the one node with cairnctl and checks that it comes
// back from its sealed configuration with the cluster's data.
func (s *suite) rebootSingle(t *testing.T, c *cluster.Cluster, n *cluster.Node, o *owner, fake *fakeNode) {
	mark := n.Mark()
	start := time.Now()
	s.cairnctl(t, c, "node", "reboot", n.ID())
	s.waitNode(t, n, mark, launch.Substring("cairn: stopping for reboot"))
	boot := s.waitNode(t, n, mark, launch.CairnBoot.Init)
	back := s.waitNode(t, n, boot.Index, launch.Mark(marker.Joined, "node", n.ID()))
	joined, _ := back.Marker()
	t.Logf("after the reboot: %s", cluster.Message(back.Text))
	s.step("reboot command → /init of the next boot", boot.Time.Sub(start))
	s.step("reboot command → rejoined ("+joined.Get("via")+")", back.Time.Sub(start))
	serving := s.waitNode(t, n, back.Index, launch.Mark(marker.CuratorServing))
	s.step("reboot command → curator serving", serving.Time.Sub(start))
	s.rejoinBreakdown(t, n, mark, start)
	// Booted by the firmware from the ESP's image, it reboots straight
	// into that image.
	if _, ok := n.VM().Console().Find(mark, kexecLine); !ok {
		t.Errorf("the reboot did not kexec into the ESP's image: %s", s.lineAfter(n, mark, "cairn: rebooting"))
	}
	// The core loaded that image while its services stopped, so PID 1
	// did not. The load bounds the shutdown, so its time is logged. A
	// core cut off at its stop deadline (on a starved host, the load
	// alone can outlast it) leaves the load to PID 1, which is what the
	// deadline is for: said, not failed.
	t.Logf("during the shutdown: %s", s.lineAfter(n, mark, "cairn: loaded the ESP's image for kexec"))
	if _, ok := n.VM().Console().Find(mark, launch.Substring("cairn: the core loaded the ESP's image for kexec")); !ok {
		if cut, late := n.VM().Console().Find(mark, launch.Substring("cairn: supervisor did not stop within")); late && cut.Index < boot.Index {
			t.Logf("PID 1 loaded the image for kexec itself, the core having been cut off at its deadline: %s", cluster.Message(cut.Text))
		} else {
			t.Errorf("PID 1 loaded the image for kexec itself: %s", s.lineAfter(n, mark, "for kexec"))
		}
	}
	// A TPM-sealed configuration opens only with the TPM that sealed it:
	// sealed with the TPM before the reboot and never sealed again, the
	// configuration the node joined with was unsealed by its TPM.
	if sealed, ok := n.VM().Console().Find(0, launch.Mark(marker.ConfigurationSealed, "tpm", "true")); !ok || sealed.Index >= boot.Index {
		t.Errorf("after the reboot the node did not unseal its configuration with its TPM: it was not sealed with it before")
	}
	if l, ok := n.VM().Console().Find(boot.Index, launch.Mark(marker.ConfigurationSealed)); ok {
		t.Errorf("after the reboot the node sealed its configuration anew instead of unsealing it: %s", cluster.Message(l.Text))
	}
	if _, ok := n.VM().Console().Find(boot.Index, launch.Mark(marker.Bootstrapping)); ok {
		t.Errorf("the node bootstrapped a new cluster after its reboot, instead of coming back to its own")
	}

	// The owner certificate from before the reboot still works, and the
	// cluster still knows both nodes.
	mgmt := api.NewManagementClient(dial(t, n.CuratorAddr(), o.creds(t)))
	var res *api.GetNodesResponse
	attempts, err := cluster.Retry(s.ctx, 3*time.Minute, func(ctx context.Context) error {
		var err error
		res, err = mgmt.GetNodes(ctx, &api.GetNodesRequest{})
		return err
	})
	if err != nil {
		t.Fatalf("GetNodes with the owner certificate after the reboot: %v", err)
	}
	s.step("reboot command → owner's first successful call", time.Since(start))
	t.Logf("GetNodes after the reboot succeeded after %d attempts", attempts)
	// The boot before keeps its story on the data partition, to the
	// owner's reboot request at its end; the running boot does not have it.
	// Node management admits the owner once the node has its owner
	// trust again, which may follow the curator's first answer.
	var previous string
	if _, err := cluster.Retry(s.ctx, 2*time.Minute, func(ctx context.Context) error {
		out, err := c.Cairnctl(ctx, "logs", n.ID(), "--boot", "-1", "--dn", "root.nodemanagement")
		previous = string(out)
		return err
	}); err != nil {
		t.Fatalf("cairnctl logs --boot -1 after the reboot: %v", err)
	}
	if !strings.Contains(previous, "reboot requested by the owner") {
		t.Errorf("cairnctl logs --boot -1 lacks the reboot request of the boot before:\n%s", previous)
	}
	if running := s.cairnctl(t, c, "logs", n.ID(), "--dn", "root.nodemanagement"); strings.Contains(running, "reboot requested by the owner") {
		t.Errorf("cairnctl logs of the running boot shows the reboot request of the boot before:\n%s", running)
	}
	if all := s.cairnctl(t, c, "logs", n.ID(), "--boot", "-1", "--backlog", "3"); strings.Count(all, "\n") != 3 {
		t.Errorf("cairnctl logs --boot -1 --backlog 3 printed:\n%s", all)
	}
	states := map[string]api.NodeState{}
	for _, node := range res.GetNodes() {
		states[node.GetId()] = node.GetState()
	}
	want := map[string]api.NodeState{n.ID(): api.NodeState_NODE_STATE_UP, fake.id: api.NodeState_NODE_STATE_UP}
	for id, st := range want {
		if states[id] != st {
			t.Errorf("after the reboot, node %s is %v, want %v (all: %v)", id, states[id], st, states)
		}
	}
}

// checkGarbageParameters checks that a node whose node parameters are
// garbage says so (marker.ParametersInvalid, and an ERROR entry with the
// reason), does not reboot or panic, and retries with backoff instead of
// in a hot loop.
func (s *suite) checkGarbageParameters(t *testing.T, n *cluster.Node) {
	invalid := launch.Mark(marker.ParametersInvalid)
	first := s.waitNode(t, n, 0, invalid)
	t.Logf("%s", cluster.Message(first.Text))
	s.waitErrorEntry(t, n, first)
	init, _ := n.VM().Console().Find(0, launch.CairnBoot.Init)
	s.step("garbage parameters: /init → error on the console", first.Time.Sub(init.Time))

	// Watch for a minute after the first error.
	const window = time.Minute
	if rest := window - time.Since(first.Time); rest > 0 {
		select {
		case <-time.After(rest):
		case <-s.ctx.Done():
			t.Fatalf("the suite's deadline passed while watching the node: %v", s.ctx.Err())
		}
	}
	if !n.Running() {
		t.Fatalf("the node with garbage parameters stopped: %v", n.VM().Wait(s.ctx))
	}
	var times []time.Time
	inits := 0
	for _, l := range n.VM().Console().Lines() {
		if invalid.MatchString(l.Text) && l.Time.Sub(first.Time) <= window {
			times = append(times, l.Time)
		}
		if launch.CairnBoot.Init.MatchString(l.Text) {
			inits++
		}
	}
	var gaps []string
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]).Round(100*time.Millisecond).String())
	}
	t.Logf("within %v of the first error: %d %s markers, %d boots; gaps between them: %s", window, len(times), marker.ParametersInvalid, inits, strings.Join(gaps, " "))
	if inits != 1 {
		t.Errorf("the node booted %d times with garbage parameters, want 1 (no reboot loop)", inits)
	}
	// A hot loop prints thousands of lines a minute; backing off from at
	// least a second prints at most one a second.
	if len(times) > int(window/time.Second) {
		t.Errorf("%d invalid-parameter errors within %v: the node retries in a hot loop instead of backing off", len(times), window)
	}
	for _, bad := range []launch.Matcher{launch.Mark(marker.Bootstrapping), launch.Mark(marker.Registering), launch.Substring("data partition mounted")} {
		if l, ok := n.VM().Console().Find(0, bad); ok {
			t.Errorf("the node with garbage parameters went on to %q", l.Text)
		}
	}
	assertNoPanic(t, n.VM())
}

// checkClock waits until node n reports its clock synchronized with the
// host side of the test network, whose SNTP server the node's DHCP lease
// names, and checks what cairnctl node describe says of it.
func (s *suite) checkClock(t *testing.T, c *cluster.Cluster, n *cluster.Node) {
	t.Helper()
	want := netns.BridgeAddr.String()
	start := time.Now()
	var clock map[string]any
	_, err := cluster.Retry(s.ctx, 2*time.Minute, func(ctx context.Context) error {
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return err
		}
		for _, node := range nodes {
			if node.ID == n.ID() {
				clock, _ = node.Raw["clock"].(map[string]any)
				if clock["state"] != "SYNCHRONIZED" || clock["server"] != want {
					return fmt.Errorf("it reports its clock as %v", clock)
				}
				return nil
			}
		}
		return fmt.Errorf("node list lacks it")
	})
	if err != nil {
		t.Errorf("node %s does not report its clock synchronized with the harness's SNTP server %s: %v", n.ID(), want, err)
		return
	}
	s.step("node 0: clock reported synchronized (after the cluster formed)", time.Since(start))
	for _, l := range strings.Split(s.cairnctl(t, c, "node", "describe", n.ID()), "\n") {
		if strings.HasPrefix(l, "Clock:") {
			t.Logf("cairnctl node describe: %s", l)
			if !strings.Contains(l, "synchronized with "+want+" (offset ") {
				t.Errorf("cairnctl node describe prints %q, want the clock synchronized with %s", l, want)
			}
			return
		}
	}
	t.Errorf("cairnctl node describe %s prints no Clock line", n.ID())
}

// countLines counts the lines of s that m matches.
func countLines(s string, m launch.Matcher) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if m.MatchString(l) {
			n++
		}
	}
	return n
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// checkMetrics reads node n's metrics through cairnctl as the owner, and
// on its metrics port with a scraper's credential from cairnctl metrics
// credential; the owner's certificate is refused there.
func (s *suite) checkMetrics(t *testing.T, c *cluster.Cluster, n *cluster.Node, o *owner) {
	t.Helper()
	want := []string{"etcd_server_has_leader 1", "cairn_node_memory_available_bytes ", `cairn_process_resident_bytes{name="init",pid="1"}`, "cairn_grpc_server_handled_total{", "cairn_curator_leading 1"}
	text := s.cairnctl(t, c, "node", "metrics", n.ID())
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("cairnctl node metrics lacks %q", w)
		}
	}
	dir := t.TempDir()
	s.cairnctl(t, c, "metrics", "credential", "--name", "e2e", "--out", dir, "--lifetime", "1h")
	scraper, err := identity.MetricsClientTLSConfig(identitytest.ReadMetricsCredential(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	get := func(cfg *tls.Config) (int, string, error) {
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		res, err := client.Get("https://" + n.MetricsAddr() + "/metrics")
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	code, body, err := get(scraper)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scraping %s with the metrics credential: %d, %v: %.300s", n.MetricsAddr(), code, err, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("the metrics port's answer lacks %q", w)
		}
	}
	ownerTLS, err := identity.OwnerClientTLSConfig(o.key, o.certDER, o.caDER)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(ownerTLS); err != nil || code != http.StatusForbidden {
		t.Errorf("scraping with the owner certificate: %d, %v: %.300s; want 403", code, err, body)
	}
}

// kexecLine is PID 1's last line before it kexecs into the ESP's image.
var kexecLine = launch.Substring("cairn: rebooting (kexec")

// lineAfter returns n's first console line from mark on that contains
// sub, or says there is none.
func (s *suite) lineAfter(n *cluster.Node, mark int, sub string) string {
	if l, ok := n.VM().Console().Find(mark, launch.Substring(sub)); ok {
		return cluster.Message(l.Text)
	}
	return "no line with " + strconv.Quote(sub)
}

// rebootPhases are the console lines that end each phase of a reboot, in
// order, for rejoinBreakdown: PID 1's shutdown lines, the firmware handing
// over to the kernel, /init, and the node's markers.
var rebootPhases = []struct {
	name string
	line launch.Matcher
}{
	{"reboot command → shutdown begins (the answer's delay)", launch.Substring("cairn: stopping for reboot")},
	{"shutdown: services stopped, synced, unmounted", launch.Substring("cairn: rebooting")},
	{"kexec, or the firmware, → kernel", launch.CairnBoot.Kernel},
	{"kernel → /init", launch.CairnBoot.Init},
	{"/init → joined (data partition unlocked, configuration unsealed)", launch.Mark(marker.Joined)},
	{"joined → etcd running", launch.Mark(marker.EtcdRunning)},
	{"etcd running → curator serving", launch.Mark(marker.CuratorServing)},
}

// rejoinBreakdown prints how long each phase of n's reboot took, from the
// reboot command at start (console line mark) to its curator serving
// again: issue 17's rejoin table.
func (s *suite) rejoinBreakdown(t *testing.T, n *cluster.Node, mark int, start time.Time) {
	t.Helper()
	prev, from := start, mark
	for _, p := range rebootPhases {
		l, ok := n.VM().Console().Find(from, p.line)
		if !ok {
			t.Logf("rejoin breakdown: no line for %q", p.name)
			return
		}
		s.step("  "+p.name, l.Time.Sub(prev))
		prev, from = l.Time, l.Index
	}
}
