//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/netns"
)

// echoPort is where the nodes of TestTwoNodesNetwork run the test-only
// echo server (cairn.test.echo).
const echoPort = 7900

// TestTwoNodesNetwork boots two nodes on a network namespace of the
// harness: each gets its fixed DHCP lease and says so on its console, node
// 0 reaches node 1's echo server (cairn.test.dial), and the host reaches
// both echo servers through the harness's port forwards.
func TestTwoNodesNetwork(t *testing.T) {
	s := newSuite(t, 2, 15*time.Minute)
	nw := netns.NewForTest(t, netns.Config{Nodes: 2, Logf: t.Logf})
	peer := nw.Node(1).IP
	flags := []string{
		fmt.Sprintf("cairn.test.echo=%d cairn.test.dial=%s:%d", echoPort, peer, echoPort),
		fmt.Sprintf("cairn.test.echo=%d", echoPort),
	}
	var nodes []*launch.Node
	for i, f := range flags {
		nodes = append(nodes, s.launchOn(nw, i, f))
	}

	for i, n := range nodes {
		ip := nw.Node(i).IP
		l := s.waitFor(n, launch.Substring(fmt.Sprintf("cairn: network address %s/24", ip)))
		s.stepSinceInit(n, l, fmt.Sprintf("node %d: /init → DHCP lease", i))
		acks := nw.Acks(i)
		if len(acks) == 0 || acks[0].IP != ip {
			t.Errorf("DHCP ACKs to node %d: %+v, want a first one for %s", i, acks, ip)
		}
	}
	l := s.waitFor(nodes[0], launch.Substring(fmt.Sprintf("cairn: echo from %s ok", peer)))
	s.stepSinceInit(nodes[0], l, "node 0: /init → echo from node 1")

	for i := range nodes {
		addr, err := nw.Forward(nw.Node(i).IP, echoPort)
		if err != nil {
			t.Fatalf("forwarding to node %d: %v", i, err)
		}
		start := time.Now()
		if err := echoOnce(addr, fmt.Sprintf("hello node %d", i)); err != nil {
			t.Errorf("echo through the forward to node %d (%s): %v", i, addr, err)
		}
		s.step(fmt.Sprintf("host → node %d echo round trip", i), time.Since(start))
	}
	for _, n := range nodes {
		assertNoPanic(t, n)
	}
}

// launchOn boots node i of nw, directly with flags added to the kernel
// command line, its network card on the node's tap and a throw-away
// overlay of the image as its disk. qemu is started inside the network's
// namespace, where the taps are.
func (s *suite) launchOn(nw *netns.Network, i int, flags string) *launch.Node {
	s.t.Helper()
	cmdline, err := os.ReadFile(artifact(s.t, "cmdline"))
	if err != nil {
		s.t.Fatal(err)
	}
	name := fmt.Sprintf("node%d", i)
	logDir := filepath.Join(repoRoot(s.t), "out", "e2e")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		s.t.Fatal(err)
	}
	logFile := filepath.Join(logDir, strings.ReplaceAll(s.t.Name(), "/", "_")+"_"+name+".console.log")
	cfg := launch.Config{Name: name, Image: artifact(s.t, "cairn.img"), MemoryMiB: *memoryFlag}
	opts := []launch.Option{
		launch.WithNetwork(launch.NoNetwork{}),
		launch.WithExtraArgs(nw.Node(i).QEMUArgs()...),
		launch.WithDirectBoot(launch.DirectBoot{
			Kernel:  artifact(s.t, "vmlinuz"),
			Initrd:  artifact(s.t, "initramfs-test.img"), // the test hooks: cairn.test.*
			Cmdline: strings.TrimSpace(string(cmdline)) + " " + flags,
		}),
		launch.WithConsoleFile(logFile),
	}
	var n *launch.Node
	err = nw.Do(func() error {
		var err error
		n, err = launch.Launch(s.ctx, cfg, opts...)
		return err
	})
	if err != nil {
		s.t.Fatalf("launching %s: %v", name, err)
	}
	s.closeAtEnd(n, logFile)
	return n
}

// echoOnce sends msg and a newline to the echo server at addr and checks
// that the same line comes back.
func echoOnce(addr, msg string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", got, msg+"\n")
	}
	return nil
}
