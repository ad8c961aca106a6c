package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/pkg/tcpproxy"
	api "cairn.dev/cairn/proto/api"
)

// PauseImage is the sandbox image of every pod. Cairn builds it
// (build/pause) and containerd imports it from the system partition at
// start, so no registry is ever asked for it.
const PauseImage = "registry.k8s.io/pause:3.10"

// pauseArchive is the pause image's archive in the payload directory.
const pauseArchive = "pause.oci.tar"

// WorkerConfig is what the worker of a node with the KubernetesWorker role
// needs.
type WorkerConfig struct {
	Layout Layout
	// NodeID is the node's ID, its Kubernetes node name.
	NodeID string
	// IP is the node's address, which the kubelet reports.
	IP netip.Addr
	// Curator issues the kubelet's certificates.
	Curator api.CuratorClient
	// APIServers are the host:port of every controller's apiserver; the
	// kubelet reaches them through a balancer on the node's loopback.
	APIServers event.Watchable[[]string]
	// Ports are the node's ports: the kubelet's, and the balancer's.
	Ports ports.Table
	// Routing is the node's one Routing, which the worker's kube-proxy
	// and pod routes program.
	Routing *Routing
	// Readiness is the node's one Readiness, through which its
	// components wait for an apiserver; nil, each asks alone.
	Readiness *Readiness
	// Ready is set to the Ready condition of the node's Node object, as
	// the pod network reads it every 10 s; nil in tests that do not care.
	Ready event.Value[bool]
	// TunnelPeers are the nodes the pod tunnel reaches, from the
	// curator's node list (TunnelPeers).
	TunnelPeers event.Watchable[[]TunnelPeer]
}

// Worker runs what makes a node take pods: containerd, the kubelet, the
// balancer in front of the apiservers, and the pod network's
// configuration.
//
//	curator ──certificates──▶ kubelet ──▶ 127.0.0.1 balancer ──▶ apiservers
//	                            │                                   │
//	                 containerd ◀┘ ◀── CNI config ◀── pod range ◀────┘
type Worker struct {
	cfg WorkerConfig
	// ownRange is the node's pod range once its Node has one, which the
	// pod network learns and the pod tunnel publishes.
	ownRange memory.Value[netip.Prefix]
}

// NewWorker returns a worker for cfg. Nothing runs before Run.
func NewWorker(cfg WorkerConfig) *Worker {
	cfg.Ports = cfg.Ports.WithDefaults()
	return &Worker{cfg: cfg}
}

func (w *Worker) dir(name ...string) string {
	return w.cfg.Layout.run(append([]string{"worker"}, name...)...)
}

func (w *Worker) containerdSocket() string { return w.dir("containerd", "containerd.sock") }

// balancerURL is where the node's components reach the apiservers.
func (w *Worker) balancerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(w.cfg.Ports.KubernetesAPIBalancer)
}

// Run runs the worker until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	if err := mkdirs(w.dir(), w.dir("cni"), w.cfg.Layout.data("containerd"), w.cfg.Layout.data("kubelet"), w.cfg.Layout.data("pods")); err != nil {
		return err
	}
	if err := w.writeEtc(); err != nil {
		return err
	}
	// What a crashed worker left, then, once this one stops, what it
	// leaves: a removed role leaves no process or mount behind.
	if err := w.cfg.Layout.cleanUp(); err != nil {
		supervisor.Logger(ctx).Warningf("Cleaning up after an earlier worker: %v", err)
	}
	defer func() {
		if err := w.cfg.Layout.cleanUp(); err != nil {
			supervisor.Logger(ctx).Warningf("Cleaning up after the worker: %v", err)
		} else {
			supervisor.Logger(ctx).Info("Worker stopped: no pod, shim or mount left")
		}
	}()
	for _, r := range []struct {
		name string
		run  supervisor.Runnable
	}{
		{"modules", loadModules(slices.Concat(podModules, networkModules))},
		{"balancer", w.runBalancer},
		{"registries", w.runRegistries},
		{"containerd", w.runContainerd},
		{"kubelet", w.runKubelet},
		{"podnetwork", w.runPodNetwork},
		{"tunnel", func(ctx context.Context) error {
			return runTunnel(ctx, tunnelConfig{
				keyFile: w.cfg.Layout.data(tunnelKeyFile), nodeID: w.cfg.NodeID, curator: w.cfg.Curator,
				peers: w.cfg.TunnelPeers, routing: w.cfg.Routing, own: &w.ownRange,
			})
		}},
		{"networkpolicy", w.runNetworkPolicy},
		{"proxy", w.runProxy},
		{"dns", w.runDNS},
		{"volumes", w.runVolumes},
	} {
		if err := supervisor.Run(ctx, r.name, r.run); err != nil {
			return fmt.Errorf("when starting the %s: %w", r.name, err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// writeEtc gives the node the files of /etc that the kubelet and
// containerd insist on and a node without users or D-Bus lacks: a user
// database with root alone (the kubelet reads it for user namespaces), a
// machine ID derived from the node ID (cAdvisor reports it), and a hosts
// file (every pod's starts from it). Files already there are
// left alone.
func (w *Worker) writeEtc() error {
	sum := sha256.Sum256([]byte(w.cfg.NodeID))
	files := map[string]string{
		"passwd":     "root:x:0:0:root:/:/bin/false\n",
		"group":      "root:x:0:\n",
		"machine-id": hex.EncodeToString(sum[:16]) + "\n",
		// containerd starts every pod's /etc/hosts from the node's.
		"hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
	}
	if err := os.MkdirAll(w.cfg.Layout.Etc, 0o755); err != nil {
		return fmt.Errorf("when creating %s: %w", w.cfg.Layout.Etc, err)
	}
	for name, content := range files {
		path := filepath.Join(w.cfg.Layout.Etc, name)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := writeFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runBalancer forwards connections on the loopback to the controllers'
// apiservers, the first that answers, so that the kubelet keeps working
// when one controller goes away.
func (w *Worker) runBalancer(ctx context.Context) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(w.cfg.Ports.KubernetesAPIBalancer))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("when listening on %s: %w", addr, err)
	}
	var backends tcpproxy.Backends
	if err := supervisor.Run(ctx, "backends", func(ctx context.Context) error {
		wt := w.cfg.APIServers.Watch()
		defer wt.Close()
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			eps, err := wt.Get(ctx)
			if err != nil {
				return err
			}
			if backends.Set(eps) {
				supervisor.Logger(ctx).Infof("Apiservers: %v", eps)
			}
		}
	}); err != nil {
		return fmt.Errorf("when following the apiservers: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	return tcpproxy.Serve(ctx, lis, &backends)
}

// runContainerd runs containerd, and imports the pause image once it
// serves.
func (w *Worker) runContainerd(ctx context.Context) error {
	dir := w.dir("containerd")
	if err := mkdirs(dir, w.dir("containerd", "state"), w.dir("registry")); err != nil {
		return err
	}
	config := dir + "/config.toml"
	if err := writeFile(config, []byte(w.containerdConfig()), 0o600); err != nil {
		return err
	}
	if err := supervisor.Run(ctx, "pause-image", w.importPause); err != nil {
		return fmt.Errorf("when starting the pause image's import: %w", err)
	}
	return w.cfg.Layout.runComponent(ctx, w.cfg.Layout.command(w.cfg.Layout.bin("containerd"), "--config", config), time.Time{})
}

// containerdConfig is containerd's configuration (version 3, containerd
// 2.x): its state on the data partition, its sockets on the tmpfs, runc
// from the payload, the CNI plugins of the payload with the configuration
// runPodNetwork writes, the pinned pause image, and registry hosts from
// w.dir("registry"). runc jails containers with pivot_root, which works
// because /init has moved the node's root off the initramfs's rootfs
// (cmd/init, newroot.go).
//
// The CRI plugin samples every container's and sandbox's CPU through its
// shim once a minute, not every second as containerd does by default:
// the samples only give CRI's usageNanoCores, which the kubelet replaces
// with cAdvisor's reading of the same cgroup for every container
// cAdvisor has seen (its stats package, addCadvisorContainerStats), and
// the resource metrics API reads the kubelet's CPU counters, not rates.
// Each sample is a ttrpc call to every shim. On an idle worker of make
// cluster with one pod, every 10 s rather than every second took its
// shim from 1.3–2.2 % of the CPU to 0.5 %, and containerd from 2.8–3.8 %
// to 2.3 %; with 20 idle pods, every minute rather than every 10 s took
// their shims from 13.9 % of the CPU to 10.5 %, and containerd from
// 13.4 % to 11.7 %.
//
// containerd brings a pod's loopback interface up itself, over netlink,
// rather than through the CNI plugin loopback, one program less to run
// at each pod's start and end: in a burst of pods, the programs that
// run and end (runc, the CNI plugins) and the kernel take a fifth of a
// worker's CPU while the pods start and half while they are deleted
// (make bench-churn), and under emulation each run of a Go program costs
// tens of milliseconds of CPU.
func (w *Worker) containerdConfig() string {
	q := strconv.Quote
	return `version = 3
root = ` + q(w.cfg.Layout.data("containerd")) + `
state = ` + q(w.dir("containerd", "state")) + `

[grpc]
  address = ` + q(w.containerdSocket()) + `

[ttrpc]
  address = ` + q(w.dir("containerd", "ttrpc.sock")) + `

[plugins."io.containerd.cri.v1.runtime"]
  stats_collect_period = "60s"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = ` + q(w.cfg.Layout.bin("runc")) + `
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [` + q(w.cfg.Layout.Bin) + `]
    conf_dir = ` + q(w.dir("cni")) + `
    use_internal_loopback = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = ` + q(PauseImage) + `
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = ` + q(w.dir("registry")) + `
`
}

// importPause imports the pause image into containerd's Kubernetes
// namespace once containerd serves, then is done.
func (w *Worker) importPause(ctx context.Context) error {
	if err := w.waitContainerd(ctx); err != nil {
		return err
	}
	cmd := w.cfg.Layout.command(w.cfg.Layout.bin("ctr"), "--address", w.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", "--local", w.cfg.Layout.bin(pauseArchive))
	if err := supervisor.RunCommand(ctx, cmd); err != nil {
		return fmt.Errorf("when importing the pause image: %w", err)
	}
	supervisor.Logger(ctx).Infof("Imported %s", PauseImage)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// waitContainerd returns once containerd serves on its socket, or ctx
// ends.
func (w *Worker) waitContainerd(ctx context.Context) error {
	for {
		if _, err := os.Stat(w.containerdSocket()); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runKubelet runs the kubelet with certificates of the Kubernetes CA for
// the node's name, once containerd serves: a kubelet that finds no
// container runtime exits at once, and under emulation its restart costs
// seconds of CPU that containerd, starting beside it, needs.
func (w *Worker) runKubelet(ctx context.Context) error {
	dir := w.dir("kubelet")
	client, kubeconfig, err := w.nodeKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	serving, err := issue(ctx, w.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_SERVING, dir, "serving")
	if err != nil {
		return err
	}
	config := dir + "/config.json"
	if err := writeJSON(config, w.kubeletConfig(serving)); err != nil {
		return err
	}
	if err := w.waitContainerd(ctx); err != nil {
		return err
	}
	cmd := w.cfg.Layout.command(w.cfg.Layout.workerBin("kubelet"),
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+w.cfg.Layout.data("kubelet"),
		"--hostname-override="+w.cfg.NodeID,
		"--node-ip="+w.cfg.IP.String(),
		"--cert-dir="+dir,
	)
	return w.cfg.Layout.runComponent(ctx, cmd, soonest(client, serving))
}

// nodeKubeconfig gives a component of the worker the node's Kubernetes
// identity (system:node:<ID>): a client certificate in dir and a
// kubeconfig there that reaches the apiservers through the balancer.
func (w *Worker) nodeKubeconfig(ctx context.Context, dir string) (*credential, string, error) {
	return issueKubeconfig(ctx, w.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT, dir, w.balancerURL())
}

// nodeAPIClient issues a client credential of the node's kubelet
// identity into dir and returns a client of the apiservers (through the
// balancer) that presents it, and the credential, whose renewAt ends it.
func (w *Worker) nodeAPIClient(ctx context.Context, dir string) (*apiClient, *credential, error) {
	return issueClient(ctx, w.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT, dir, w.balancerURL())
}

// kubeletConfig is the kubelet's KubeletConfiguration.
func (w *Worker) kubeletConfig(serving *credential) map[string]any {
	return map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": serving.CA},
		},
		"authorization":            map[string]string{"mode": "Webhook"},
		"tlsCertFile":              serving.Cert,
		"tlsPrivateKeyFile":        serving.Key,
		"port":                     w.cfg.Ports.Kubelet,
		"readOnlyPort":             0,
		"healthzPort":              0,
		"clusterDomain":            ClusterDomain,
		"clusterDNS":               []string{ClusterDNS},
		"resolvConf":               "",
		"cgroupDriver":             "cgroupfs",
		"containerRuntimeEndpoint": "unix://" + w.containerdSocket(),
		"podLogsDir":               w.cfg.Layout.data("pods"),
		"rotateCertificates":       false,
		"serverTLSBootstrap":       false,
		"failSwapOn":               false,
		"protectKernelDefaults":    false,
	}
}

// runPodNetwork masquerades pod traffic that leaves the pod range; waits
// until the node's Node object has its pod range, then writes the CNI
// configuration for it, which makes the kubelet report the network ready,
// and hands the range to the pod tunnel (runTunnel), which routes the
// other nodes' ranges.
func (w *Worker) runPodNetwork(ctx context.Context) error {
	defer w.cfg.Routing.hold(ctx)()
	dir := w.dir("podnetwork")
	cl, cred, err := w.nodeAPIClient(ctx, dir)
	if err != nil {
		return err
	}
	nf, err := nftables.New()
	if err != nil {
		return fmt.Errorf("when opening nftables: %w", err)
	}
	if err := setMasquerade(nf, podPrefix); err != nil {
		return err
	}
	lg := supervisor.Logger(ctx)
	var written netip.Prefix
	return followPodRanges(ctx, cl, w.cfg.Readiness, w.cfg.NodeID, cred.renewAt, func(ranges []podRange) (bool, error) {
		err := w.apply(ranges, &written, lg.Infof)
		return written.IsValid(), err
	})
}

// followPodRanges calls apply with every node's pod range: at once when
// a Node changes, which it learns from a watch, and again every 10 s (2 s
// until apply reports it is ready) with the ranges it last learned, so
// that what failed is tried again without asking the apiserver.
// Before the watch, which waits for the apiserver to be ready, it gives
// apply the range of self's own Node (ownRange).
// It runs until ctx ends or renewAt. It logs what fails once, until it
// changes, and reports the runnable healthy once apply is ready.
func followPodRanges(ctx context.Context, cl *apiClient, r *Readiness, self string, renewAt time.Time, apply func([]podRange) (ready bool, err error)) error {
	lg := supervisor.Logger(ctx)
	rctx, cancel := context.WithDeadlineCause(ctx, renewAt, errRenew)
	defer cancel()
	// The follower leaves only the latest ranges here (leave); a change
	// it reports replaces one this loop has not taken yet.
	latest := make(chan []podRange, 1)
	leave := func(ranges []podRange) {
		select {
		case <-latest:
		default:
		}
		latest <- ranges
	}
	err := supervisor.Run(ctx, "nodes", func(ctx context.Context) error {
		own, err := ownRange(ctx, cl, self)
		if err != nil {
			return err
		}
		leave(own)
		// Until the apiserver is ready, a failed list would restart
		// the follower with a backoff of up to 30 s; asked every
		// second instead, a new cluster's nodes learn their ranges
		// as soon as it can tell them.
		if err := cl.waitReady(ctx, r, supervisor.Logger(ctx).Infof); err != nil {
			return err
		}
		return follow(ctx, cl, "/api/v1/nodes", healthyAfter(ctx, func(nodes map[string]kubeNode) error {
			leave(podRanges(nodes))
			return nil
		}))
	})
	if err != nil {
		return fmt.Errorf("when starting to follow the Nodes: %w", err)
	}
	var ranges []podRange
	known := false
	lastErr := ""
	wait := 2 * time.Second
	for {
		select {
		case <-rctx.Done():
			return stopped(ctx)
		case ranges = <-latest:
			known = true
		case <-time.After(wait):
		}
		if !known {
			continue
		}
		ready, err := apply(ranges)
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				lg.Infof("Pod network: %v", err)
				lastErr = msg
			}
		} else {
			lastErr = ""
		}
		wait = 2 * time.Second
		if ready {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			wait = 10 * time.Second
		}
	}
}

// ownRange waits until the Node of self has its pod range and returns it,
// asking every readyInterval. A kubelet's credential may read its own
// Node as soon as the apiserver serves, long before it is ready: on a new
// cluster its default RBAC objects are still being made, and then the
// reconciler's, which let a node list the others (cairn:pod-network),
// while the controller gives ranges from the start (runPodRanges). So
// the node writes its CNI configuration, and its kubelet reports it
// Ready, without waiting for either.
func ownRange(ctx context.Context, cl *apiClient, self string) ([]podRange, error) {
	var own []podRange
	err := waitUntil(ctx, "the pod range of Node "+self, 30*time.Second, supervisor.Logger(ctx).Infof, func() (bool, error) {
		var n kubeNode
		if err := cl.do(ctx, http.MethodGet, "/api/v1/nodes/"+self, "", nil, &n); err != nil {
			return false, err
		}
		own = podRanges(map[string]kubeNode{self: n})
		if !own[0].Range.IsValid() {
			return false, errors.New("the Node has no pod range yet")
		}
		return true, nil
	})
	return own, err
}

// apply writes the CNI configuration for the node's own range when it is
// new (written is the range written last), and hands the range to the pod
// tunnel, which routes the others.
func (w *Worker) apply(ranges []podRange, written *netip.Prefix, logf func(string, ...any)) error {
	var own netip.Prefix
	for _, r := range ranges {
		if r.Node == w.cfg.NodeID {
			own = r.Range
			if w.cfg.Ready != nil {
				w.cfg.Ready.Set(r.Ready)
			}
		}
	}
	if !own.IsValid() {
		return fmt.Errorf("node %s has no pod range yet", w.cfg.NodeID)
	}
	if own != *written {
		if err := writeJSON(w.dir("cni", "10-cairn.conflist"), cniConfig(own)); err != nil {
			return err
		}
		logf("Pod network on %s", own)
		*written = own
		w.ownRange.Set(own)
	}
	return nil
}

// podRanges is every node's pod range and internal address, from their
// Node objects, in the order of the nodes' names.
func podRanges(nodes map[string]kubeNode) []podRange {
	out := make([]podRange, 0, len(nodes))
	for _, n := range nodes {
		r := podRange{Node: n.Metadata.Name,
			Ready: slices.Contains(n.Status.Conditions, nodeCondition{Type: "Ready", Status: "True"})}
		if p, err := netip.ParsePrefix(n.Spec.PodCIDR); err == nil {
			r.Range = p
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b podRange) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// hostPortTable is the nftables table (family ip) in which the CNI portmap
// plugin forwards pods' host ports (cniConfig).
const hostPortTable = "cni_hostport"

// cniConfig is the pod network's CNI configuration on the node's pod
// range: a veth pair per pod routed by the node (ptp), addresses from the
// range (host-local), and the pod's host ports forwarded to it (portmap,
// in nftables: its own table, cni_hostport, which kube-proxy's and
// Cairn's leave alone).
func cniConfig(r netip.Prefix) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "cairn",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    tunnelMTU,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": r.String()}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{
				"type":         "portmap",
				"backend":      "nftables",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
}
