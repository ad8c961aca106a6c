package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/test/launch"
)

// Node is one node of a cluster: its place on the network, its disk, TPM
// state and firmware variables, and the qemu process of its current boot, if any.
type Node struct {
	cluster        *Cluster
	index          int
	name           string
	ip             netip.Addr
	curatorAddr    string
	managementAddr string
	kubernetesAddr string
	metricsAddr    string
	disk           string
	tpmDir         string
	varStore       string

	mu     sync.Mutex
	id     string
	params []byte
	vm     *launch.Node
	boots  int
}

// Cluster returns the cluster the node belongs to.
func (n *Node) Cluster() *Cluster { return n.cluster }

// Name returns the node's name, "node<i>".
func (n *Node) Name() string { return n.name }

// Index returns the node's place in the cluster, counting from 0.
func (n *Node) Index() int { return n.index }

// IP returns the address the node is leased on the cluster's network.
func (n *Node) IP() netip.Addr { return n.ip }

// CuratorAddr returns the host address forwarded to the node's curator
// port.
func (n *Node) CuratorAddr() string { return n.curatorAddr }

// ManagementAddr returns the host address forwarded to the node's
// management port.
func (n *Node) ManagementAddr() string { return n.managementAddr }

// KubernetesAddr returns the host address forwarded to the node's
// Kubernetes apiserver port.
func (n *Node) KubernetesAddr() string { return n.kubernetesAddr }

// MetricsAddr returns the host address forwarded to the node's metrics
// port.
func (n *Node) MetricsAddr() string { return n.metricsAddr }

// Disk returns the path of the node's disk.
func (n *Node) Disk() string { return n.disk }

// ID returns the node's ID once one of its consoles named it, or "".
func (n *Node) ID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}

// VM returns the qemu process of the node's current or last boot, or nil
// if it never booted.
func (n *Node) VM() *launch.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vm
}

// Boots returns how many times the node was launched.
func (n *Node) Boots() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boots
}

// Running reports whether the node's qemu runs (whatever the guest does).
func (n *Node) Running() bool {
	vm := n.VM()
	if vm == nil {
		return false
	}
	select {
	case <-vm.Done():
		return false
	default:
		return true
	}
}

// Boot launches the node from its disk (a copy of the image, made on the
// first boot) with params as its node parameters through fw_cfg. Nil
// params keep those of the last boot: a real machine keeps its
// parameters on its ESP, and a node with a sealed configuration ignores
// them. extra are added to this boot's launch after every other option,
// such as a direct boot of a test initramfs with flags of its own. The
// node must not be running.
func (n *Node) Boot(ctx context.Context, params []byte, extra ...launch.Option) (*launch.Node, error) {
	c := n.cluster
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.vm != nil {
		select {
		case <-n.vm.Done():
			n.vm.Close()
		default:
			return nil, fmt.Errorf("node %s is running already", n.name)
		}
	}
	if params != nil {
		n.params = params
	}
	if err := n.ensureDisk(ctx); err != nil {
		return nil, err
	}
	n.boots++
	opts := []launch.Option{
		launch.WithWritableImage(),
		launch.WithNetwork(launch.NoNetwork{}),
		launch.WithExtraArgs(c.net.Node(n.index).QEMUArgs()...),
		launch.WithConsoleFile(filepath.Join(c.cfg.ConsoleDir,
			fmt.Sprintf("%s%s.boot%d.console.log", c.cfg.ConsolePrefix, n.name, n.boots))),
	}
	if n.params != nil {
		opts = append(opts, launch.WithParameters(n.params))
	}
	if c.cfg.TPM {
		opts = append(opts, launch.WithTPMState(n.tpmDir))
	}
	// The firmware's boot entries live in its variable store, which a
	// relaunch (Kill, then Boot) must keep, as a machine's flash does: a
	// node that booted a system slot through a Boot#### entry boots it
	// again.
	opts = append(opts, launch.WithVarStore(n.varStore))
	if c.cfg.Console != nil {
		opts = append(opts, launch.WithConsoleCopy(&prefixWriter{w: c.cfg.Console, prefix: n.name + "| "}))
	}
	opts = append(opts, c.cfg.LaunchOptions...)
	opts = append(opts, extra...)
	cfg := launch.Config{Name: n.name, Image: n.disk, MemoryMiB: c.cfg.MemoryMiB, CPUs: c.cfg.CPUs}
	var vm *launch.Node
	// qemu must start inside the namespace, where the taps are.
	err := c.net.Do(func() error {
		var err error
		vm, err = launch.Launch(ctx, cfg, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.vm = vm
	c.followers.Add(1)
	go n.follow(vm)
	return vm, nil
}

// ensureDisk copies the image to the node's disk unless it exists. Launch
// grows the copy to launch.DiskSize, room for the data partition.
func (n *Node) ensureDisk(ctx context.Context) error {
	if _, err := os.Stat(n.disk); err == nil {
		return nil
	}
	tmp := n.disk + ".tmp"
	out, err := exec.CommandContext(ctx, "cp", "--sparse=always", n.cluster.cfg.Image, tmp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("when copying the image for %s: %w: %s", n.name, err, bytes.TrimSpace(out))
	}
	return os.Rename(tmp, n.disk)
}

// progressLine picks the console lines that tell how a node's boot and
// enrolment go, for progress reports: every marker, and the lines of
// /init's console protocol that say where the boot is.
var progressLine progressMatcher

// initProgress are the lines of /init's console protocol that progressLine
// picks, panics, and the two ends of a reboot through the firmware (the
// kernel resetting the machine, the firmware starting a boot entry), so
// that the firmware's share of a reboot shows apart from the kernel's and
// /init's.
var initProgress = regexp.MustCompile(`cairn: init started|cairn: network address|cairn: stopping for|panic:|cairn: root runnable failed|reboot: machine restart|BdsDxe: starting`)

type progressMatcher struct{}

func (progressMatcher) MatchString(s string) bool {
	_, ok := marker.Parse(s)
	return ok || initProgress.MatchString(s)
}

// idMarkers are the markers whose node field is the ID of the node that
// states them.
var idMarkers = []marker.Name{
	marker.Bootstrapped,
	marker.Registering,
	marker.WaitingForApproval,
	marker.Committed,
	marker.Joined,
}

// nodeID returns the ID a console line states, if it is one of
// idMarkers.
func nodeID(line string) (string, bool) {
	m, ok := marker.Parse(line)
	if !ok || !slices.Contains(idMarkers, m.Name) || m.Get("node") == "" {
		return "", false
	}
	return m.Get("node"), true
}

// idLine matches the console lines that name the node's ID.
var idLine idMatcher

type idMatcher struct{}

func (idMatcher) MatchString(s string) bool {
	_, ok := nodeID(s)
	return ok
}

func (idMatcher) String() string { return fmt.Sprintf("a marker with the node's ID %v", idMarkers) }

// follow reports vm's progress lines until its console ends, and notes the
// node's ID.
func (n *Node) follow(vm *launch.Node) {
	defer n.cluster.followers.Done()
	start := vm.Started()
	for from := 0; ; {
		l, err := vm.Console().WaitFrom(context.Background(), from, progressLine)
		if err != nil {
			return
		}
		from = l.Index + 1
		if id, ok := nodeID(l.Text); ok {
			n.setID(id)
		}
		n.cluster.logf("%s +%5.1fs %s", n.name, l.Time.Sub(start).Seconds(), Message(l.Text))
	}
}

func (n *Node) setID(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.id = id
}

// Message returns the message of a console line: what follows the log
// entry's "file:line] " header, or the line as it is.
func Message(line string) string {
	if _, msg, ok := strings.Cut(line, "] "); ok {
		return msg
	}
	return line
}

// WaitFor waits for a line of the current boot's console, from index from
// on, that m matches. It fails when ctx ends or qemu exits first.
func (n *Node) WaitFor(ctx context.Context, from int, m launch.Matcher) (launch.Line, error) {
	vm := n.VM()
	if vm == nil {
		return launch.Line{}, fmt.Errorf("node %s never booted", n.name)
	}
	return vm.WaitFrom(ctx, from, m)
}

// Mark returns the index of the current console's next line: wait from it
// for what follows an action.
func (n *Node) Mark() int {
	vm := n.VM()
	if vm == nil {
		return 0
	}
	return len(vm.Console().Lines())
}

// WaitID waits until a marker of the current boot named the node's ID,
// and returns it.
func (n *Node) WaitID(ctx context.Context) (string, error) {
	l, err := n.WaitFor(ctx, 0, idLine)
	if err != nil {
		return "", err
	}
	return n.noteID(l)
}

// noteID takes the node's ID from l, a marker of idMarkers, and keeps it.
func (n *Node) noteID(l launch.Line) (string, error) {
	id, ok := nodeID(l.Text)
	if !ok {
		return "", fmt.Errorf("%s: %q names no node ID", n.name, l.Text)
	}
	n.setID(id)
	return id, nil
}

// Kill ends the node's qemu at once, like pulling the power cord, and
// releases its host resources. Disk, TPM state and firmware variables
// stay.
func (n *Node) Kill() error {
	vm := n.VM()
	if vm == nil {
		return nil
	}
	return vm.Close()
}

// PowerOff presses the node's power button, waits up to timeout for the
// node to power off by itself, and releases its host resources. A node
// that does not power off in time is killed, and PowerOff says so.
func (n *Node) PowerOff(ctx context.Context, timeout time.Duration) error {
	vm := n.VM()
	if vm == nil || !n.Running() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := vm.Powerdown(ctx)
	if err == nil {
		err = vm.Wait(ctx)
	}
	if cerr := vm.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return fmt.Errorf("powering %s off: %w", n.name, err)
	}
	return nil
}

// prefixWriter writes each complete line it is given to w, prefixed.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

// consoleMu keeps lines of different nodes whole on a shared writer.
var consoleMu sync.Mutex

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(p.prefix), p.buf[:i+1]...)
		consoleMu.Lock()
		_, _ = p.w.Write(line)
		consoleMu.Unlock()
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}
