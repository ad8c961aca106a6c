//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// powerCutSteps are the steps TestPowerCut cuts at in `make test`; with
// -long (`make test-long`) it cuts at every step of node/testpoint.
//
// Registered is the cut the operator issue names first: a machine the
// cluster lists NEW must come back as that node, not as a second one,
// and be approved again. MkfsRunning cuts in the middle of a write to the
// data partition, after the node committed: the next boot must commit
// again as the same (UP) node and redo the unfinished partition. Together
// they run both halves of the fix (registration keys kept on the ESP, and
// a partition without its header set up again) through the production
// /init; the other steps are variations of these two.
var powerCutSteps = []testpoint.Step{testpoint.Registered, testpoint.MkfsRunning}

// TestPowerCut is item 8 of the operator issue: power cuts during a
// node's first boot and enrolment. A one-node cluster forms; then, for
// each step, a fresh machine (a spare node of the cluster: its own blank
// disk copy and TPM) boots the test initramfs with
// cairn.test.stop-at=<step> and register parameters, is approved when
// the step comes after approval, and stops at the step
// (marker.TestPointReached). The test kills qemu there, as a power cut
// does, and boots the machine again from its disk, through OVMF and the
// production /init, with the same parameters. Each time:
//
//   - the machine enrols to the end as the node it was before the cut
//     (committed, or for a cut after sealing joined, under the same ID);
//   - the cluster's node list gained exactly one record, that node's, UP;
//   - the disk holds one data partition, with its header. Right after
//     the cut it held none (registered, committed), one without its
//     header (the storage steps: an unfinished setup, which the next boot
//     may redo) or, after sealing, one with its header, holding the
//     node's identity: the join opens it with MountExisting, which never
//     formats, finds that identity there, and the header is unchanged.
func TestPowerCut(t *testing.T) {
	steps, deadline := powerCutSteps, 20*time.Minute
	if *longFlag {
		steps, deadline = testpoint.Steps(), 45*time.Minute
	}
	s := newSuite(t, 2, deadline)
	c := s.newCluster(1, len(steps))
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the one-node cluster: %v", err)
	}
	for _, p := range c.Phases() {
		s.step(p.Name, p.Duration)
	}
	params, err := c.RegisterParams(s.ctx)
	if err != nil {
		t.Fatalf("register parameters: %v", err)
	}
	t.Logf("cutting the power at %q", steps)
	for i, step := range steps {
		t.Run(string(step), func(t *testing.T) {
			start := time.Now()
			s.powerCut(t, c, c.Node(1+i), params, step)
			t.Logf("power cut at %s: took %v", step, time.Since(start).Round(time.Millisecond))
			s.step(fmt.Sprintf("%s: whole step", step), time.Since(start))
		})
	}
}

// powerCut boots n, a machine that never booted, with register
// parameters and the test initramfs stopping at step, cuts its power
// there, boots it again and checks what TestPowerCut says.
func (s *suite) powerCut(t *testing.T, c *cluster.Cluster, n *cluster.Node, params []byte, step testpoint.Step) {
	before := s.nodeStates(t, c)

	vm, err := n.Boot(s.ctx, params, s.testInitramfs(t, "cairn.test.stop-at="+string(step)))
	if err != nil {
		t.Fatalf("booting %s with the test initramfs: %v", n.Name(), err)
	}
	id, err := n.WaitID(s.ctx)
	if err != nil {
		t.Fatalf("%s never named itself: %v", n.Name(), err)
	}
	if step != testpoint.Registered {
		// Every other step comes after the owner's approval.
		s.waitNode(t, n, 0, launch.Mark(marker.WaitingForApproval, "node", id))
		s.cairnctl(t, c, "node", "approve", id)
	}
	reached := s.waitNode(t, n, 0, launch.Mark(marker.TestPointReached, "name", string(step)))
	if err := n.Kill(); err != nil {
		t.Fatalf("cutting the power of %s: %v", n.Name(), err)
	}
	cut := time.Now()
	s.step(fmt.Sprintf("%s: launch → stopped at the step", step), reached.Time.Sub(vm.Started()))
	t.Logf("%s (%s) stopped at %s and had its power cut", n.Name(), id, step)
	assertNoPanic(t, vm)
	if l, ok := vm.Console().Find(0, launch.Mark(marker.Committed)); ok {
		t.Errorf("before the cut at %s the node finished enrolling: %s", step, cluster.Message(l.Text))
	}
	// What the cut left on the disk: a registering node makes its data
	// partition once committed, and marks it set up (the header) last,
	// before it seals.
	cutHeader := checkCutDisk(t, n.Disk(), step)

	// The next boot: the production image through OVMF, the same
	// parameters through fw_cfg, the disk and TPM as the cut left them.
	vm, err = n.Boot(s.ctx, nil)
	if err != nil {
		t.Fatalf("booting %s again: %v", n.Name(), err)
	}
	again, err := n.WaitID(s.ctx)
	if err != nil {
		t.Fatalf("%s never named itself after the cut: %v", n.Name(), err)
	}
	if again != id {
		t.Fatalf("after the cut at %s the machine enrols as %s, before it as %s: the cluster would list it twice", step, again, id)
	}
	var done launch.Line
	switch step {
	case testpoint.Sealed:
		done = s.waitNode(t, n, 0, launch.Mark(marker.Joined, "node", id))
	case testpoint.Registered:
		// The cluster lists the node NEW: the owner approves it.
		s.waitNode(t, n, 0, launch.Mark(marker.WaitingForApproval, "node", id))
		s.cairnctl(t, c, "node", "approve", id)
		fallthrough
	default:
		done = s.waitNode(t, n, 0, launch.Mark(marker.Committed, "node", id))
	}
	s.step(fmt.Sprintf("%s: cut → enrolled again", step), done.Time.Sub(cut))
	t.Logf("after the cut: %s", cluster.Message(done.Text))

	// One record more in the cluster, the machine's, UP.
	var added map[string]string
	if _, err := cluster.Retry(s.ctx, 3*time.Minute, func(ctx context.Context) error {
		added = map[string]string{}
		for nid, st := range s.nodeStates(t, c) {
			if _, ok := before[nid]; !ok {
				added[nid] = st
			}
		}
		if added[id] != "UP" {
			return fmt.Errorf("%s is not UP yet: new records %v", id, added)
		}
		return nil
	}); err != nil {
		t.Errorf("waiting for %s to be UP: %v", id, err)
	}
	if d := cmp.Diff(map[string]string{id: "UP"}, added); d != "" {
		t.Errorf("records the machine added to the cluster differ (-want +got):\n%s", d)
	}

	if err := n.PowerOff(s.ctx, 2*time.Minute); err != nil {
		t.Errorf("%v", err)
	}
	assertNoPanic(t, vm)
	header, ok := dataPartitionHeader(t, n.Disk())
	switch {
	case !ok:
		t.Errorf("after enrolling again the disk has no data partition")
	case string(header[:8]) != "CAIRNDAT":
		t.Errorf("after enrolling again the data partition starts with %q, not the header of a set-up partition", header[:8])
	case cutHeader != nil && !bytes.Equal(header, cutHeader):
		t.Errorf("the data partition's header changed after the cut at %s: it was set up again", step)
	}
}

// checkCutDisk checks what a cut at step left on the disk: no data
// partition before the node set it up, one without its header while the
// setup is unfinished, one with its header once the node sealed. It
// returns that header, nil for the others.
func checkCutDisk(t *testing.T, disk string, step testpoint.Step) []byte {
	t.Helper()
	header, ok := dataPartitionHeader(t, disk)
	set := ok && string(header[:8]) == "CAIRNDAT"
	switch step {
	case testpoint.Registered, testpoint.Committed:
		if ok {
			t.Errorf("after a cut at %s the disk has a data partition, want none yet", step)
		}
	case testpoint.Sealed:
		if !set {
			t.Errorf("after a cut at %s the disk has no set-up data partition (found %v)", step, ok)
		}
		return header
	default:
		if !ok || set {
			t.Errorf("after a cut at %s the disk has a data partition: %v, set up: %v; want one, not set up", step, ok, set)
		}
	}
	return nil
}

// nodeStates returns the state of every node that cairnctl node list
// shows.
func (s *suite) nodeStates(t *testing.T, c *cluster.Cluster) map[string]string {
	t.Helper()
	var nodes []cluster.NodeInfo
	if _, err := cluster.Retry(s.ctx, 2*time.Minute, func(ctx context.Context) error {
		var err error
		nodes, err = c.ListNodes(ctx)
		return err
	}); err != nil {
		t.Fatalf("node list: %v", err)
	}
	m := map[string]string{}
	for _, n := range nodes {
		if _, twice := m[n.ID]; twice {
			t.Errorf("node list shows %s twice", n.ID)
		}
		m[n.ID] = n.State
	}
	return m
}

// testInitramfs boots the image's kernel directly with the test
// initramfs (the cairn.test.* flags) and flags added to the image's
// command line.
func (s *suite) testInitramfs(t *testing.T, flags string) launch.Option {
	t.Helper()
	cmdline, err := os.ReadFile(artifact(t, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	return launch.WithDirectBoot(launch.DirectBoot{
		Kernel:  artifact(t, "vmlinuz"),
		Initrd:  artifact(t, "initramfs-test.img"),
		Cmdline: strings.TrimSpace(string(cmdline)) + " " + flags,
	})
}

// dataPartitionHeader reads the first 4 KiB of the powered-off disk's
// Cairn data partition, where MountNew writes its header last, and says
// whether there is one. A second data partition fails the test.
func dataPartitionHeader(t *testing.T, disk string) ([]byte, bool) {
	t.Helper()
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var starts []int64
	for _, p := range readGPT(t, f).Entries {
		if p.Type == gpt.TypeCairnData {
			starts = append(starts, int64(p.FirstLBA)*512)
		}
	}
	switch len(starts) {
	case 0:
		return nil, false
	case 1:
	default:
		t.Fatalf("the disk has %d data partitions (at bytes %v), want 1", len(starts), starts)
	}
	header := make([]byte, 4096)
	if _, err := f.ReadAt(header, starts[0]); err != nil {
		t.Fatalf("reading the data partition's header: %v", err)
	}
	return header, true
}
