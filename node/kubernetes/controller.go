package kubernetes

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/holds"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// The cluster's fixed Kubernetes networks (DESIGN.md).
const (
	// PodRange is where pods take their addresses, a /24 per node.
	PodRange = "10.192.0.0/11"
	// podMaskSize is the size of each node's part of PodRange.
	podMaskSize = 24
	// ServiceRange is where Services take their cluster IPs.
	ServiceRange = "10.96.0.0/12"
	// ClusterDNS is the cluster DNS Service's IP.
	ClusterDNS = "10.96.0.10"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// etcdPrefix is the apiserver's part of etcd: the proxy confines it
	// there.
	etcdPrefix = "kubernetes/"
	// FrontProxyClient is the name in the apiserver's front proxy client
	// certificate, which the curator issues
	// (CERTIFICATE_KIND_KUBERNETES_FRONT_PROXY_CLIENT): aggregated
	// apiservers accept request headers from that name alone.
	FrontProxyClient = "cairn:front-proxy-client"
	// serviceAccountIssuer names the cluster in service account tokens.
	serviceAccountIssuer = "https://kubernetes.default.svc." + ClusterDomain
)

// ControllerConfig is what the control plane of a node with the
// KubernetesController role needs.
type ControllerConfig struct {
	Layout Layout
	// IP is the node's address, which the apiserver advertises.
	IP netip.Addr
	// Curator issues the components' certificates.
	Curator api.CuratorClient
	// Etcd is the node's local etcd member, for the whole key space; the
	// apiserver reaches it only through a proxy confined to its prefix.
	Etcd *clientv3.Client
	// EtcdServer is the same member's server in this process, which the
	// proxy's reads, writes and watches reach without a connection; nil
	// sends them through Etcd.
	EtcdServer *etcdserver.EtcdServer
	// HoldEtcd keeps the local etcd member serving, once the node stops,
	// while the etcd proxy serves (consensus.Status.Hold), so that the
	// last writes of the control plane reach it. Nil holds nothing.
	HoldEtcd func() (release func())
	// Readiness is the node's one Readiness, through which its
	// components wait for an apiserver; nil, each asks alone.
	Readiness *Readiness
	// Ports are the node's ports; the apiserver listens on KubernetesAPI.
	Ports ports.Table
	// Nodes are the cluster's UP nodes, nil until known: the reconciler
	// makes the Node objects follow their roles.
	Nodes event.Watchable[[]ClusterNode]
}

// Controller runs the Kubernetes control plane of one node: the etcd
// proxy, kube-apiserver, kube-controller-manager and kube-scheduler, each
// a child process under its own runnable, and the reconciler that keeps
// what Cairn needs in the cluster.
//
//	curator ──certificates──▶ files in Layout.Run/controller
//	                               │
//	etcd ◀── proxy (prefix kubernetes/) ◀── apiserver ◀── controller-manager
//	                                            ▲  ▲──── scheduler
//	                                            └─────── reconciler
//
// When it stops, the processes stop in the order the arrows show, from
// the right, each part outliving the holds of those that use it
// (pkg/holds): the controller-manager and the scheduler hand their leader
// leases over through the apiserver, which writes them through the proxy
// into etcd.
type Controller struct {
	cfg ControllerConfig
	// apiserverUsers and proxyUsers order the stop.
	apiserverUsers, proxyUsers holds.Count
}

// stopGrace bounds how long the apiserver and the etcd proxy wait, once
// the control plane stops, for their users to stop first. Their users'
// processes get SIGKILL at most leaseHandOverGrace after SIGTERM, so it is
// only reached by a user that does not stop at all.
const stopGrace = 10 * time.Second

// leaseHandOverGrace is how long the controller-manager and the scheduler
// have, from SIGTERM to SIGKILL, to stop their controllers and give their
// leader lease up through the apiserver. The supervisor's two seconds were
// too few on a loaded emulated node: a controller-manager still stopping
// was killed holding its lease, and the node the role moved to waited the
// whole 60 s lease for it (TestKubernetes, h-controller-moves).
const leaseHandOverGrace = 8 * time.Second

// NewController returns a control plane for cfg. Nothing runs before Run.
func NewController(cfg ControllerConfig) *Controller {
	cfg.Ports = cfg.Ports.WithDefaults()
	return &Controller{cfg: cfg}
}

func (c *Controller) dir(name ...string) string {
	return c.cfg.Layout.run(append([]string{"controller"}, name...)...)
}

// apiserverURL is where the node's own components reach its apiserver.
func (c *Controller) apiserverURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.cfg.Ports.KubernetesAPI)
}

// Run runs the control plane until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if err := mkdirs(c.dir()); err != nil {
		return err
	}
	proxy := NewEtcdProxy(c.cfg.Etcd, c.cfg.EtcdServer, etcdPrefix, c.dir("etcd.sock"))
	runProxy := func(ctx context.Context) error {
		if c.cfg.HoldEtcd != nil {
			defer c.cfg.HoldEtcd()()
		}
		ctx, stop := c.proxyUsers.Outlive(ctx, stopGrace)
		defer stop()
		return proxy.Run(ctx)
	}
	if err := supervisor.Run(ctx, "etcd-proxy", runProxy); err != nil {
		return fmt.Errorf("when starting the etcd proxy: %w", err)
	}
	for _, r := range []struct {
		name string
		run  supervisor.Runnable
	}{
		{"prefetch", func(ctx context.Context) error { return prefetch(ctx, c.cfg.Layout.bin("hyperkube")) }},
		{"apiserver", c.runAPIServer},
		{"controller-manager", c.runControllerManager},
		{"scheduler", c.runScheduler},
		{"reconciler", c.runReconciler},
		{"metrics", c.runMetrics},
	} {
		if err := supervisor.Run(ctx, r.name, r.run); err != nil {
			return fmt.Errorf("when starting the %s: %w", r.name, err)
		}
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// serviceAccountKey writes the cluster's service account signing key,
// which every controller shares, and returns its path.
func (c *Controller) serviceAccountKey(ctx context.Context, dir string) (string, error) {
	res, err := c.cfg.Curator.GetKubernetesServiceAccountKey(ctx, &api.GetKubernetesServiceAccountKeyRequest{})
	if err != nil {
		return "", fmt.Errorf("when asking the curator for the service account key: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(res.PrivateKey)
	if err != nil {
		return "", fmt.Errorf("when parsing the service account key: %w", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return "", fmt.Errorf("the service account key is a %T, want ECDSA", k)
	}
	// SEC 1, which both of the apiserver's flags read (it takes public
	// keys from --service-account-key-file only in that form).
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		return "", fmt.Errorf("when encoding the service account key: %w", err)
	}
	if err := mkdirs(dir); err != nil {
		return "", err
	}
	path := dir + "/service-account.key"
	b := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if err := writeFile(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// runAPIServer runs kube-apiserver on the etcd proxy.
func (c *Controller) runAPIServer(ctx context.Context) error {
	dir := c.dir("apiserver")
	serving, err := issue(ctx, c.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_SERVING, dir, "serving")
	if err != nil {
		return err
	}
	kubelet, err := issue(ctx, c.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_KUBELET_CLIENT, dir, "kubelet-client")
	if err != nil {
		return err
	}
	// The aggregation layer's front proxy client, in a directory of its
	// own: its ca.crt is the front proxy CA's, not the Kubernetes CA's.
	frontProxy, err := issue(ctx, c.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_FRONT_PROXY_CLIENT, dir+"/front-proxy", "client")
	if err != nil {
		return err
	}
	sa, err := c.serviceAccountKey(ctx, dir)
	if err != nil {
		return err
	}
	admission := dir + "/admission.json"
	if err := writeJSON(admission, AdmissionConfiguration()); err != nil {
		return err
	}
	cmd := c.cfg.Layout.command(c.cfg.Layout.bin("kube-apiserver"), APIServerArgs(APIServerFiles{
		IP: c.cfg.IP, Port: c.cfg.Ports.KubernetesAPI, Etcd: "unix://" + c.dir("etcd.sock"),
		Serving: serving.Cert, ServingKey: serving.Key, CA: serving.CA,
		KubeletClient: kubelet.Cert, KubeletClientKey: kubelet.Key,
		FrontProxyCA: frontProxy.CA, FrontProxyClient: frontProxy.Cert, FrontProxyClientKey: frontProxy.Key,
		ServiceAccountKey: sa, Admission: admission, Dir: dir,
	})...)
	// The last GOGC in Env is the one the apiserver gets.
	cmd.Env = append(cmd.Env, "GOGC="+APIServerGOGC)
	defer c.proxyUsers.Take()()
	ctx, stop := c.apiserverUsers.Outlive(ctx, stopGrace)
	defer stop()
	return c.cfg.Layout.runComponent(ctx, cmd, soonest(serving, kubelet, frontProxy))
}

// APIServerFiles are what kube-apiserver starts with on a controller: the
// node's address and port, etcd's endpoint, and the paths of its
// certificates, keys and configuration. test/apiserverbench makes its own
// to start the payload's apiserver as a controller does.
type APIServerFiles struct {
	IP   netip.Addr
	Port int
	// Etcd is etcd's endpoint: unix:// and the etcd proxy's socket.
	Etcd string
	// Serving and ServingKey are the apiserver's serving certificate and
	// its key; CA is the Kubernetes CA, which clients' certificates and
	// kubelets' serving certificates chain to.
	Serving, ServingKey, CA string
	// KubeletClient and its key: the apiserver's certificate as a client
	// of kubelets.
	KubeletClient, KubeletClientKey string
	// FrontProxyCA certifies FrontProxyClient, the aggregation layer's
	// client certificate (with its key).
	FrontProxyCA, FrontProxyClient, FrontProxyClientKey string
	// ServiceAccountKey signs service account tokens (SEC 1 PEM);
	// Admission is the admission configuration (AdmissionConfiguration);
	// Dir is the apiserver's own directory.
	ServiceAccountKey, Admission, Dir string
}

// APIServerArgs are kube-apiserver's arguments on a controller.
func APIServerArgs(f APIServerFiles) []string {
	return []string{
		"--advertise-address=" + f.IP.String(),
		"--secure-port=" + strconv.Itoa(f.Port),
		"--etcd-servers=" + f.Etcd,
		// The apiserver compacts etcd, as upstream's does: its watch
		// cache learns of compactions only from its own (EtcdProxy).
		"--etcd-compaction-interval=5m",
		"--tls-cert-file=" + f.Serving,
		"--tls-private-key-file=" + f.ServingKey,
		"--client-ca-file=" + f.CA,
		"--kubelet-client-certificate=" + f.KubeletClient,
		"--kubelet-client-key=" + f.KubeletClientKey,
		"--kubelet-certificate-authority=" + f.CA,
		"--kubelet-preferred-address-types=InternalIP",
		// The aggregation layer: the apiserver proxies to aggregated
		// apiservers (metrics-server, say) as the front proxy client,
		// naming the caller in these headers, and publishes the front
		// proxy CA and the one name it certifies for them to check.
		"--requestheader-client-ca-file=" + f.FrontProxyCA,
		"--requestheader-allowed-names=" + FrontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.FrontProxyClient,
		"--proxy-client-key-file=" + f.FrontProxyClientKey,
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + f.ServiceAccountKey,
		"--service-account-signing-key-file=" + f.ServiceAccountKey,
		"--service-cluster-ip-range=" + ServiceRange,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--admission-control-config-file=" + f.Admission,
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir=" + f.Dir,
	}
}

// AdmissionConfiguration enforces Pod Security's baseline level in every
// namespace but kube-system, and warns about and audits what the
// restricted level would refuse.
func AdmissionConfiguration() any {
	return map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
		"plugins": []any{map[string]any{
			"name": "PodSecurity",
			"configuration": map[string]any{
				"apiVersion": "pod-security.admission.config.k8s.io/v1",
				"kind":       "PodSecurityConfiguration",
				"defaults": map[string]string{
					"enforce": "baseline", "enforce-version": "latest",
					"audit": "restricted", "audit-version": "latest",
					"warn": "restricted", "warn-version": "latest",
				},
				"exemptions": map[string][]string{
					"usernames": {}, "runtimeClasses": {}, "namespaces": {"kube-system"},
				},
			},
		}},
	}
}

// runControllerManager runs kube-controller-manager against the local
// apiserver. Cairn gives the pod ranges itself (runPodRanges).
func (c *Controller) runControllerManager(ctx context.Context) error {
	dir := c.dir("controller-manager")
	sa, err := c.serviceAccountKey(ctx, dir)
	if err != nil {
		return err
	}
	return c.runClient(ctx, "kube-controller-manager", api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_CONTROLLER_MANAGER, dir,
		func(cred *credential) []string {
			return []string{
				"--cert-dir=" + dir,
				"--service-account-private-key-file=" + sa,
				"--root-ca-file=" + cred.CA,
				"--use-service-account-credentials=true",
				"--allocate-node-cidrs=false",
				"--service-cluster-ip-range=" + ServiceRange,
				"--configure-cloud-routes=false",
				// Stopped, it gives up its lease, as the scheduler
				// does by default (alpha in 1.37; it logs that an
				// unsupported gate is on).
				"--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true",
			}
		})
}

// runScheduler runs kube-scheduler against the local apiserver.
func (c *Controller) runScheduler(ctx context.Context) error {
	return c.runClient(ctx, "kube-scheduler", api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_SCHEDULER, c.dir("scheduler"),
		func(*credential) []string { return nil })
}

// Leader election of the controller-manager and the scheduler. Kubernetes'
// defaults (a 15 s lease, renewed within 10 s) make a leader whose
// apiserver stalls for 10 s exit; on a small or busy node, where the
// leader has just started every controller and their informers fill the
// CPU, that stall is its own doing, and the restarted leader makes it
// again. A 60 s lease renewed within 40 s rides out such a stall. A
// leader stopped on purpose gives its lease up through its apiserver,
// which stops after it (holds); only a leader whose machine died makes
// the next one wait up to 60 s for its lease to expire. The leader renews
// its lease every retry period, each time a write to etcd: every 10 s is
// a fifth of the writes of Kubernetes' 2 s default, and still four tries
// within the renewal deadline.
const (
	leaderLease = "60s"
	leaderRenew = "40s"
	leaderRetry = "10s"
)

// runClient runs the component bin, a client of the local apiserver, with
// a certificate of kind in a kubeconfig in dir, and the flags of its own
// that flags returns. It starts it only once the apiserver is ready:
// started earlier, the controller-manager and the scheduler exit at once,
// and on a slow CPU their restarts take the time the apiserver needs to
// finish starting within its own deadlines.
func (c *Controller) runClient(ctx context.Context, bin string, kind api.CertificateKind, dir string, flags func(*credential) []string) error {
	cred, kubeconfig, err := issueKubeconfig(ctx, c.cfg.Curator, kind, dir, c.apiserverURL())
	if err != nil {
		return err
	}
	cl, err := newAPIClient(c.apiserverURL(), cred)
	if err != nil {
		return err
	}
	if err := cl.waitReady(ctx, c.cfg.Readiness, supervisor.Logger(ctx).Infof); err != nil {
		return err
	}
	// Each runs again with a fresh credential at renewAt; the day after
	// it leaves room for a late restart.
	servingCert, servingKey, err := loopbackServing(dir, cred.renewAt.Add(24*time.Hour))
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		// Their own HTTPS port takes client certificates of the
		// Kubernetes CA, named here rather than looked up in the
		// apiserver's extension-apiserver-authentication ConfigMap,
		// whose request-header CA Cairn leaves unset: looked up, its
		// absence is logged as an error every minute.
		"--client-ca-file=" + cred.CA,
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		// Without a certificate, each makes itself an RSA key at every
		// start (loopbackServing).
		"--tls-cert-file=" + servingCert,
		"--tls-private-key-file=" + servingKey,
		"--profiling=false",
		"--leader-elect-lease-duration=" + leaderLease,
		"--leader-elect-renew-deadline=" + leaderRenew,
		"--leader-elect-retry-period=" + leaderRetry,
	}, flags(cred)...)
	defer c.apiserverUsers.Take()()
	return c.cfg.Layout.runComponent(ctx, c.cfg.Layout.command(c.cfg.Layout.bin(bin), args...), cred.renewAt, supervisor.KillGrace(leaseHandOverGrace))
}
