package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/l2switch"
	"cairn.dev/cairn/test/launch/netns"
)

// NetChaosEnv names the environment variable that, when Config.Switch is
// nil, gives the network profile of every cluster a process makes (as
// l2switch.ParseProfile reads it): the nodes are then joined by the
// harness's switch, which impairs their links. Unset or empty keeps the
// kernel's bridge.
const NetChaosEnv = "CAIRN_NET_CHAOS"

// Config describes a cluster.
type Config struct {
	// Nodes is how many nodes Form brings up: node 0 bootstraps, the
	// others register and are approved. At least 1.
	Nodes int
	// Spare is how many more nodes the network has room for (tap, fixed
	// lease, forwards): nodes a caller boots itself with parameters of its
	// choice, such as a wrong register ticket.
	Spare int
	// Image is the raw disk image every node boots; each node gets a copy
	// of its own, made on its first boot. The image is never written.
	// When ReleaseKeyFile (make release's release.pub) lies beside it,
	// the cluster trusts that release key from its bootstrap on.
	Image string
	// Cairnctl is the cairnctl binary run as the operator.
	Cairnctl string
	// Dir holds the cluster's files (disks, TPM states, parameters, the
	// cairnctl config directory). It is created if missing and outlives
	// the cluster.
	Dir string
	// ConsoleDir is where each boot's raw console goes, as
	// <Prefix><node>.boot<k>.console.log. Empty means Dir.
	ConsoleDir string
	// ConsolePrefix starts every console file's name, such as a test's
	// name.
	ConsolePrefix string
	// MemoryMiB is each node's memory; zero means launch's default.
	MemoryMiB int
	// CPUs is each node's number of virtual CPUs; zero means launch's
	// default.
	CPUs int
	// TPM gives each node a TPM 2.0 (swtpm) whose state lives in Dir.
	TPM bool
	// StorageSecurity is the cluster's storage security policy, as
	// cairnctl params bootstrap --storage-security takes it. Empty means
	// "encrypted".
	StorageSecurity string
	// TPMMode is the cluster's TPM mode, as cairnctl params bootstrap --tpm
	// takes it. Empty means "best-effort".
	TPMMode string
	// SecureBoot is what the cluster requires of its nodes' boot, as
	// cairnctl params bootstrap --secure-boot takes it ("required",
	// "bound"). Empty means "optional".
	SecureBoot string
	// HostPortBase, when not zero, fixes the host ports of the forwards:
	// node i's port p is on 127.0.0.1:(HostPortBase + 100*i + p%100), so
	// that with 7800 node 0 is at 7833 and 7835, node 1 at 7933 and 7935.
	// Zero takes free ports.
	HostPortBase int
	// Logf receives progress lines: the markers nodes state and /init's
	// boot progress, as they come, and what the harness does. Nil
	// discards them.
	// It is not called after Close returns.
	Logf func(format string, args ...any)
	// Console, when not nil, receives every console line of every node,
	// prefixed with the node's name.
	Console io.Writer
	// LaunchOptions are added to every node's launch (binaries,
	// accelerator).
	LaunchOptions []launch.Option
	// EarlyBoot has Form boot every node at once, as an operator powers
	// on a rack: node 0 with bootstrap parameters, the others with none,
	// so that they wait for parameters (marker.WaitingForParameters).
	// Once the owner holds the new cluster, each of them is given a
	// parameters disk (cairnctl params register --disk), plugged in while
	// it runs. Without it the others boot only then, with their register
	// parameters through fw_cfg.
	EarlyBoot bool
	// StickNodes are the nodes, of those EarlyBoot boots without
	// parameters, whose parameters disk is a USB stick (on a USB
	// controller) rather than a disk in an empty PCI Express slot.
	StickNodes []int
	// Switch, when not nil, joins the nodes with the harness's own switch
	// instead of the kernel's bridge, impairing every link as the
	// profile says (delay, jitter, loss, duplication, reordering), and
	// lets Network().Partition cut nodes off. Nil follows NetChaosEnv.
	// New fills in the seed it picked, if any.
	Switch *l2switch.Profile
	// Context, when not empty, names the cairnctl context that
	// StoreContext adds to (or replaces in) the user's own cairnctl
	// configuration directory ($XDG_CONFIG_HOME/cairnctl) and selects, so
	// that a plain `cairnctl` reaches the cluster. Only people's clusters
	// (launch-cluster) set it: tests leave the user's configuration alone.
	// The cluster's own configuration directory is used either way.
	Context string
	// Registry, when not empty, is the OCI distribution registry program
	// (make registry) that New runs on the host side of the network, at
	// 10.42.0.1:5000, as the cluster's mirror of docker.io: bootstrap
	// parameters name it (cairnctl params bootstrap --registry-mirror),
	// so that pods' images come from it and never from the internet.
	// The network's DNS server then also names it RegistryName.
	Registry string
	// RegistryHostAddr is where the host reaches the registry; empty
	// takes a free port of 127.0.0.1 (RegistryHost tells which).
	RegistryHostAddr string
	// Images are OCI image archives (pkg/ociimage, each manifest named
	// [docker.io/]REPOSITORY:TAG) that New pushes into the registry: an
	// image, or a release and its signature (pkg/release).
	Images []string
}

// Cluster is a network with its nodes, and the owner's cairnctl
// configuration. Its methods are safe for concurrent use.
type Cluster struct {
	cfg       Config
	net       *netns.Network
	nodes     []*Node
	configDir string
	// followers counts the goroutines that report console lines to Logf.
	followers sync.WaitGroup

	// registry is the registry's process, registryHost where the host
	// reaches it; nil and empty without Config.Registry.
	registry     *exec.Cmd
	registryHost string

	mu      sync.Mutex
	created time.Time
	phases  []launch.Phase
	closed  bool
}

// New creates the cluster's directory, its network and the port forwards
// of every node. It boots nothing: Form does. Always Close the cluster.
func New(cfg Config) (*Cluster, error) {
	if cfg.Nodes < 1 || cfg.Spare < 0 {
		return nil, fmt.Errorf("cluster of %d nodes and %d spare: want at least one node", cfg.Nodes, cfg.Spare)
	}
	if cfg.Image == "" || cfg.Cairnctl == "" || cfg.Dir == "" {
		return nil, errors.New("cluster needs an image, a cairnctl binary and a directory")
	}
	for _, p := range []*string{&cfg.Image, &cfg.Cairnctl, &cfg.Dir, &cfg.ConsoleDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	if cfg.ConsoleDir == "" {
		cfg.ConsoleDir = cfg.Dir
	}
	if cfg.StorageSecurity == "" {
		cfg.StorageSecurity = "encrypted"
	}
	if cfg.TPMMode == "" {
		cfg.TPMMode = "best-effort"
	}
	for _, d := range []string{cfg.Dir, cfg.ConsoleDir, filepath.Join(cfg.Dir, "params")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("when making cluster directory: %w", err)
		}
	}
	if cfg.Switch == nil {
		if env := os.Getenv(NetChaosEnv); env != "" {
			p, err := l2switch.ParseProfile(env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", NetChaosEnv, err)
			}
			cfg.Switch = &p
		}
	}
	var names map[string]netip.Addr
	if cfg.Registry != "" {
		names = map[string]netip.Addr{RegistryName: netns.BridgeAddr}
	}
	nw, err := netns.New(netns.Config{Nodes: cfg.Nodes + cfg.Spare, Switch: cfg.Switch, Names: names})
	if err != nil {
		return nil, fmt.Errorf("when creating the cluster's network: %w", err)
	}
	if sw := nw.Switch(); sw != nil {
		p := sw.Profile()
		cfg.Switch = &p
	}
	c := &Cluster{
		cfg:       cfg,
		net:       nw,
		configDir: filepath.Join(cfg.Dir, "cairnctl"),
		created:   time.Now(),
	}
	for i, nn := range nw.Nodes() {
		n, err := c.newNode(i, nn)
		if err != nil {
			nw.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	if cfg.Switch != nil {
		c.logf("cluster: the nodes are joined by the harness's switch; its decisions replay with %s=%s", NetChaosEnv, cfg.Switch)
	}
	if cfg.Registry != "" {
		if err := c.startRegistry(context.Background()); err != nil {
			c.Close()
			return nil, fmt.Errorf("when starting the cluster's registry: %w", err)
		}
	}
	return c, nil
}

// newNode sets up node i's forwards and file names.
func (c *Cluster) newNode(i int, nn netns.Node) (*Node, error) {
	name := fmt.Sprintf("node%d", i)
	n := &Node{
		cluster:  c,
		index:    i,
		name:     name,
		ip:       nn.IP,
		disk:     filepath.Join(c.cfg.Dir, name+".img"),
		tpmDir:   filepath.Join(c.cfg.Dir, name+".tpm"),
		varStore: filepath.Join(c.cfg.Dir, name+".vars.fd"),
	}
	var err error
	if n.curatorAddr, err = c.forward(i, nn, ports.Curator); err != nil {
		return nil, err
	}
	if n.managementAddr, err = c.forward(i, nn, ports.NodeManagement); err != nil {
		return nil, err
	}
	if n.kubernetesAddr, err = c.forward(i, nn, ports.KubernetesAPI); err != nil {
		return nil, err
	}
	if n.metricsAddr, err = c.forward(i, nn, ports.Metrics); err != nil {
		return nil, err
	}
	return n, nil
}

func (c *Cluster) forward(i int, nn netns.Node, port int) (string, error) {
	from := "127.0.0.1:0"
	if c.cfg.HostPortBase != 0 {
		from = fmt.Sprintf("127.0.0.1:%d", c.cfg.HostPortBase+100*i+port%100)
	}
	addr, err := c.net.ForwardFrom(from, nn.IP, port)
	if err != nil {
		return "", fmt.Errorf("when forwarding to node %d: %w", i, err)
	}
	return addr, nil
}

// Config returns the cluster's configuration, with defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// Network returns the cluster's network.
func (c *Cluster) Network() *netns.Network { return c.net }

// Node returns node i (the spare nodes follow the cluster's).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes returns the first Config.Nodes nodes: the cluster's, not the
// spare ones.
func (c *Cluster) Nodes() []*Node { return c.nodes[:c.cfg.Nodes] }

// ConfigDir returns cairnctl's configuration directory for this cluster:
// the owner key, certificate and CA.
func (c *Cluster) ConfigDir() string { return c.configDir }

// Phases returns the timings the cluster recorded (Form's), in order.
func (c *Cluster) Phases() []launch.Phase {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]launch.Phase(nil), c.phases...)
}

// phase records a timing.
func (c *Cluster) phase(name string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phases = append(c.phases, launch.Phase{Name: name, Duration: d})
}

// logf passes a progress line to Config.Logf until Close.
func (c *Cluster) logf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Logf != nil && !c.closed {
		c.cfg.Logf(format, args...)
	}
}

// Close kills every node, waits for their console followers, reports
// what the switch did to each port's frames, if there is a switch, and
// removes the network. Dir stays.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		if err := n.Kill(); err != nil {
			errs = append(errs, err)
		}
	}
	c.followers.Wait()
	if sw := c.net.Switch(); sw != nil {
		for _, p := range sw.Ports() {
			c.logf("cluster: switch port %s: %v", p.Name(), p.Stats())
		}
	}
	if err := c.stopRegistry(); err != nil {
		errs = append(errs, fmt.Errorf("when stopping the registry: %w", err))
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if err := c.net.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
