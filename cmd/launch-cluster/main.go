// Command launch-cluster boots a local Cairn cluster of N nodes in qemu for
// people, the way `make cluster` runs it, and keeps it up until Ctrl-C.
//
//	launch-cluster -n 3 -image out/cairn.img -cairnctl out/cairnctl
//	    │
//	    ├─ node1..N-1 boot without parameters: each waits for a disk
//	    ├─ cairnctl params bootstrap ─▶ node0 (fw_cfg) ─▶ curator serving
//	    ├─ cairnctl takeownership   (owner key and certificate in -dir)
//	    ├─ cairnctl params register --disk ─▶ plugged into node1..N-1
//	    │     while they run ─▶ registering ─▶ waiting for approval
//	    ├─ cairnctl node approve    ─▶ committed, UP
//	    ├─ cairnctl config add-context local --from <dir>/cairnctl --use
//	    │     (your $XDG_CONFIG_HOME/cairnctl: plain cairnctl reaches it)
//	    └─ prints the cairnctl command lines that reach the cluster,
//	       then waits; Ctrl-C powers every node down (again: kills them)
//
// The nodes run in a network namespace of their own (test/launch/netns);
// node i's curator and management ports are forwarded to the host's
// 127.0.0.1 at -port-base + 100*i + 33 and + 35, so with the default base
// node 0 answers at the standard ports 7833 and 7835. Each node keeps its
// disk and TPM state in -dir, which a new run starts afresh. The cluster
// work is test/launch/cluster's.
//
// -net-chaos joins the nodes with the harness's own switch instead of the
// kernel's bridge and impairs every link as its profile says
// (test/launch/l2switch): -net-chaos=delay=50ms,jitter=20ms,loss=2%,
// dup=0.5%,reorder=0.5%,seed=42. The seed is printed at the start, to
// replay a run's network. Without the flag, $CAIRN_NET_CHAOS gives the
// profile, if set.
//
// -registry runs the OCI distribution registry program it names (make
// registry) on the host side of the network, at 10.42.0.1:5000 for the
// nodes and -registry-addr (127.0.0.1:5000) for the host, as the cluster's
// mirror of docker.io, and pushes the image archives of -push into it:
// `make cluster` pushes the test agent as cairn/agent:1, and anything
// pushed to 127.0.0.1:5000 as library/NAME runs as NAME with no internet.
//
// The owner's files stay in -dir/cairnctl, as the cluster harness keeps
// them; -context NAME (default "local") also copies them into your own
// cairnctl configuration as context NAME, replacing an earlier cluster's,
// and selects it. -context "" leaves your configuration alone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"cairn.dev/cairn/test/launch/cluster"
	"cairn.dev/cairn/test/launch/l2switch"
)

// dirMarker marks a directory as launch-cluster's, which a new run may
// empty.
const dirMarker = ".launch-cluster"

func main() {
	cfg, grace, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "launch-cluster: %v\n", err)
		os.Exit(2)
	}
	cfg.Logf = say
	if err := run(cfg, grace); err != nil {
		fmt.Fprintf(os.Stderr, "launch-cluster: %v\n", err)
		os.Exit(1)
	}
}

// defaultContextName is the cairnctl context a cluster is added as.
const defaultContextName = "local"

// parseFlags reads the command line into the cluster's configuration and
// the grace of the power-down.
func parseFlags(args []string) (cluster.Config, time.Duration, error) {
	fs := flag.NewFlagSet("launch-cluster", flag.ContinueOnError)
	nodes := fs.Int("n", 3, "number of nodes")
	image := fs.String("image", "out/cairn.img", "raw disk image every node boots a copy of (never modified)")
	cairnctl := fs.String("cairnctl", "out/cairnctl", "cairnctl binary to form the cluster with")
	dir := fs.String("dir", "out/cluster", "directory for the nodes' disks, TPM states, consoles and cairnctl's config (emptied at start)")
	memory := fs.Int("memory", 2048, "memory of each node in MiB")
	cpus := fs.Int("cpus", 1, "virtual CPUs of each node")
	tpm := fs.Bool("tpm", true, "give every node a TPM 2.0 (swtpm)")
	storage := fs.String("storage-security", "encrypted", "storage security of the cluster: encrypted or insecure")
	portBase := fs.Int("port-base", 7800, "node i's ports 7833 and 7835 are forwarded from 127.0.0.1:(base+100*i+33|35); 0 takes free ports")
	console := fs.Bool("console", false, "copy every node's serial console to standard output, prefixed with its name")
	grace := fs.Duration("shutdown-timeout", 2*time.Minute, "how long to wait for the nodes to power off before killing them")
	contextName := fs.String("context", defaultContextName, "cairnctl context to add (or replace) in $XDG_CONFIG_HOME/cairnctl and select, so that a plain cairnctl reaches the cluster; empty leaves your cairnctl configuration alone")
	kube := fs.Bool("kubernetes", true, "give node 0 KubernetesController and the other nodes KubernetesWorker, and write a kubeconfig into -dir")
	registry := fs.String("registry", "", "OCI distribution registry program (make registry) to run at 10.42.0.1:5000 as the cluster's mirror of docker.io; empty runs none")
	registryAddr := fs.String("registry-addr", "127.0.0.1:5000", "where the host reaches the registry, to push images into it")
	push := fs.String("push", "", "comma-separated OCI image archives (docker.io/REPOSITORY:TAG) to push into the registry")
	chaos := fs.String("net-chaos", "", "network profile of the harness's switch that joins the nodes, such as delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42 (delay=0 impairs nothing); empty: $"+cluster.NetChaosEnv+" if set, else the kernel's bridge")
	if err := fs.Parse(args); err != nil {
		return cluster.Config{}, 0, err
	}
	if fs.NArg() > 0 {
		return cluster.Config{}, 0, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := cluster.Config{
		Nodes:           *nodes,
		Image:           *image,
		Cairnctl:        *cairnctl,
		Dir:             *dir,
		MemoryMiB:       *memory,
		CPUs:            *cpus,
		TPM:             *tpm,
		StorageSecurity: *storage,
		HostPortBase:    *portBase,
		Context:         *contextName,
		Registry:        *registry,
		EarlyBoot:       true,
	}
	if *registry != "" {
		cfg.RegistryHostAddr = *registryAddr
		if *push != "" {
			cfg.Images = strings.Split(*push, ",")
		}
	} else if *push != "" {
		return cluster.Config{}, 0, errors.New("-push needs -registry")
	}
	kubernetesOn = *kube
	if *console {
		cfg.Console = os.Stdout
	}
	if *chaos != "" {
		p, err := l2switch.ParseProfile(*chaos)
		if err != nil {
			return cluster.Config{}, 0, fmt.Errorf("-net-chaos: %w", err)
		}
		cfg.Switch = &p
	}
	return cfg, *grace, nil
}

// run forms the cluster, prints how to reach it and keeps it up until an
// interrupt.
func run(cfg cluster.Config, grace time.Duration) error {
	for _, f := range []string{cfg.Image, cfg.Cairnctl} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w (make image cairnctl builds both)", err)
		}
	}
	if err := freshDir(cfg.Dir); err != nil {
		return err
	}
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c, err := cluster.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	say("forming a cluster of %d nodes (consoles in %s; Ctrl-C powers it down)", cfg.Nodes, c.Config().ConsoleDir)
	formErr := c.Form(interrupted)
	if formErr != nil {
		say("the cluster did not form: %v", formErr)
		say("the nodes stay up for a look at their consoles; Ctrl-C powers them down")
	} else {
		printPhases(c)
		kubeconfig := ""
		var rolesGiven time.Time
		if kubernetesOn {
			var err error
			if kubeconfig, rolesGiven, err = startKubernetes(interrupted, c); err != nil {
				say("Kubernetes: %v", err)
				kubeconfig = ""
			}
		}
		announce(interrupted, c, os.Stderr)
		if kubeconfig != "" {
			fmt.Fprintf(os.Stderr, "\nkubectl as the owner (Kubernetes starts within minutes under emulation):\n  %s\n  %s\n",
				cluster.ShellLine(filepath.Join(filepath.Dir(cfg.Cairnctl), "kubectl"), "--kubeconfig", kubeconfig, "get", "nodes"),
				cluster.ShellLine(filepath.Join(filepath.Dir(cfg.Cairnctl), "kubectl"), "--kubeconfig", kubeconfig, "get", "pods", "-A"))
		}
		if r := c.RegistryHost(); r != "" {
			fmt.Fprintf(os.Stderr, "\nregistry: %s from this machine, the nodes' mirror of docker.io (an image pushed\nthere as library/NAME runs as NAME; %d image(s) pushed, such as cairn/agent:1)\n", r, len(cfg.Images))
		}
		if kubeconfig != "" {
			kubectl := filepath.Join(filepath.Dir(cfg.Cairnctl), "kubectl")
			waitWorkersReady(interrupted, kubectl, kubeconfig, max(1, len(c.Nodes())-1), rolesGiven)
		}
	}
	<-interrupted.Done()
	stop()
	return errors.Join(formErr, powerdown(c, grace))
}

// kubernetesOn is -kubernetes.
var kubernetesOn = true

// startKubernetes gives node 0 the KubernetesController role and every
// other node KubernetesWorker (a one-node cluster gets both on node 0),
// and writes a kubeconfig whose context reaches node 0's apiserver through
// its forward. It returns the kubeconfig's path and when the last role was
// given.
func startKubernetes(ctx context.Context, c *cluster.Cluster) (string, time.Time, error) {
	nodes := c.Nodes()
	roles := [][2]string{{nodes[0].ID(), "KubernetesController"}}
	for _, n := range nodes[1:] {
		roles = append(roles, [2]string{n.ID(), "KubernetesWorker"})
	}
	if len(nodes) == 1 {
		roles = append(roles, [2]string{nodes[0].ID(), "KubernetesWorker"})
	}
	for _, r := range roles {
		if _, err := c.Cairnctl(ctx, "node", "add-role", r[0], r[1]); err != nil {
			return "", time.Time{}, err
		}
	}
	given := time.Now()
	kubeconfig := filepath.Join(c.Config().Dir, "kubeconfig")
	if _, err := c.Cairnctl(ctx, "kubeconfig", "--out", kubeconfig, "--apiserver", "https://"+nodes[0].KubernetesAddr()); err != nil {
		return "", time.Time{}, err
	}
	say("node 0 runs the Kubernetes control plane, the other nodes are its workers; kubeconfig in %s", kubeconfig)
	return kubeconfig, given, nil
}

// workersReadyTimeout is how long waitWorkersReady waits.
const workersReadyTimeout = 15 * time.Minute

// waitWorkersReady asks the apiserver, through kubectl, every 2 s until
// workers Nodes are Ready, and says how long after the roles were given
// (since) that was: the figure a user waits for. It gives up, saying so,
// after workersReadyTimeout, and quietly when ctx ends.
func waitWorkersReady(ctx context.Context, kubectl, kubeconfig string, workers int, since time.Time) {
	deadline := time.Now().Add(workersReadyTimeout)
	ready, last := 0, ""
	for time.Now().Before(deadline) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "--request-timeout=5s",
			"-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`).CombinedOutput()
		if err == nil {
			ready = strings.Count(string(out), "True")
			if ready >= workers {
				say("Kubernetes: %d worker(s) Ready, %.1f s after the roles were given", ready, time.Since(since).Seconds())
				return
			}
		} else {
			last = strings.TrimSpace(string(out))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
	say("Kubernetes: %d of %d worker(s) Ready after %s (last kubectl error: %q); the nodes' logs say why (cairnctl logs ID)", ready, workers, workersReadyTimeout, last)
}

// freshDir empties dir if an earlier run made it, and marks it as ours.
// It refuses a directory that holds anything else.
func freshDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, dirMarker)); err != nil {
			return fmt.Errorf("%s is not empty and was not made by launch-cluster: choose another -dir", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, dirMarker), nil, 0o644)
}

// printPhases prints how long forming the cluster took.
func printPhases(c *cluster.Cluster) {
	w := tabwriter.NewWriter(os.Stderr, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  phase\tseconds\n")
	for _, p := range c.Phases() {
		fmt.Fprintf(w, "  %s\t%7.1f\n", p.Name, p.Duration.Seconds())
	}
	w.Flush()
}

// announce stores the cluster's endpoints in its cairnctl configuration
// directory and, when the configuration names a context, adds the cluster
// to the user's own cairnctl configuration under that name and selects it.
// Then it writes to w the cairnctl command lines that reach the cluster
// from a shell of this machine: plain ones through the context, else ones
// naming the cluster's configuration directory.
func announce(ctx context.Context, c *cluster.Cluster, w io.Writer) {
	line := c.CommandLine
	name := c.Config().Context
	switch err := c.StoreNodeEndpoints(ctx); {
	case err != nil:
		say("could not store the node endpoints in cairnctl's config (%v); the lines below spell them out", err)
		line = c.FullCommandLine
	case name == "":
	default:
		if err := c.StoreContext(ctx); err != nil {
			say("could not add the context %s to your cairnctl configuration (%v); the lines below name the cluster's own", name, err)
			break
		}
		say("your cairnctl now uses the context %s, this cluster (`cairnctl config contexts` lists them; `cairnctl config use-context NAME` switches back)", name)
		line = c.ContextCommandLine
	}
	id0, id1 := c.Node(0).ID(), c.Node(min(1, len(c.Nodes())-1)).ID()
	fmt.Fprintf(w, "\nThe cluster is up. Nodes:\n")
	for _, n := range c.Nodes() {
		fmt.Fprintf(w, "  %s  %s  %s  curator %s  management %s  metrics %s\n", n.Name(), n.ID(), n.IP(), n.CuratorAddr(), n.ManagementAddr(), n.MetricsAddr())
	}
	fmt.Fprintf(w, "\ncairnctl as the owner:\n")
	for _, args := range [][]string{
		{"cluster", "info"},
		{"node", "list"},
		{"node", "describe", id0},
		{"logs", id0, "-f"},
		{"node", "add-role", id1, "ConsensusMember"},
		{"node", "remove-role", id1, "ConsensusMember"},
		{"node", "reboot", id1},
		{"params", "register", "--out", filepath.Join(c.Config().Dir, "params", "register.pb")},
	} {
		fmt.Fprintf(w, "  %s\n", line(args...))
	}
	fmt.Fprintf(w, "\nCtrl-C powers the cluster down.\n")
}

// powerdown presses every node's power button at once and waits for them
// to power off; nodes still running after grace, or at a second
// interrupt, are killed, and the error says so.
func powerdown(c *cluster.Cluster, grace time.Duration) error {
	again, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("powering the cluster down (up to %v; Ctrl-C again kills it)", grace)
	var wg sync.WaitGroup
	errs := make([]error, len(c.Nodes()))
	for i, n := range c.Nodes() {
		wg.Go(func() {
			if errs[i] = n.PowerOff(again, grace); errs[i] == nil && n.VM() != nil {
				say("%s powered off", n.Name())
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// say tells the person at the terminal what happens.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s launch-cluster: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
