package curator

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/pki"
	api "cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// The Kubernetes PKI: a CA of its own, apart from the cluster CA, kept in
// etcd next to it, and the service account signing key. Nodes draw the
// keys of their Kubernetes components themselves and send only the public
// halves; the curator decides every name from its record of the node and
// issues only to nodes holding the role (kubernetesKinds). No leaf is
// kept: they are short-lived, and their holders ask again.
//
//	kubelet (KubernetesWorker) ───────┐
//	apiserver, controller-manager,    ├─ IssueCertificate ─▶ Kubernetes CA
//	scheduler, reconciler (Controller)┘                      (kubernetes-pki/ca)
//	cairnctl kubernetes credential ──── IssueKubernetesCredential ─┘
//	apiserver's front proxy client ──── IssueCertificate ─▶ front proxy CA
//	                                                 (kubernetes-pki/front-proxy-ca)

// The lifetimes of Kubernetes certificates. The apiserver does not read
// CRLs, so a lifetime is what bounds the access of a node that lost its
// role or left the cluster: its components stop being renewed, and what
// they hold ends within a day. The owner's credentials are renewed by
// cairnctl whenever kubectl needs one, so they can be shorter still.
const (
	DefaultKubernetesCertificateLifetime = 24 * time.Hour
	DefaultKubernetesOwnerLifetime       = time.Hour
)

// WithKubernetesLifetimes sets the lifetimes of the Kubernetes component
// and owner certificates; zero keeps the defaults. Tests shorten them.
func WithKubernetesLifetimes(component, owner time.Duration) Option {
	return func(o *options) {
		if component > 0 {
			o.kubernetesLifetime = component
		}
		if owner > 0 {
			o.kubernetesOwnerLifetime = owner
		}
	}
}

// kubernetesServiceIP is the first address of the Service range: the
// kubernetes Service's, which pods dial the apiserver at.
var kubernetesServiceIP = netip.MustParseAddr("10.96.0.1")

// kubernetesKind says who may have a certificate of a Kubernetes kind and
// what it says.
type kubernetesKind struct {
	// controller says the kind is for KubernetesController, else for
	// KubernetesWorker.
	controller bool
	// frontProxy says the front proxy CA signs the kind, not the
	// Kubernetes CA.
	frontProxy bool
	// template returns the certificate's template for node id at addr.
	template func(id string, addr netip.Addr) x509.Certificate
}

var kubernetesKinds = map[api.CertificateKind]kubernetesKind{
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT: {
		template: func(id string, _ netip.Addr) x509.Certificate {
			return kubeClient("system:node:"+id, "system:nodes")
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_SERVING: {
		template: func(id string, addr netip.Addr) x509.Certificate {
			t := pki.Server(id, []net.IP{addr.AsSlice()})
			t.Subject = pkix.Name{CommonName: "system:node:" + id, Organization: []string{"system:nodes"}}
			return t
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_VOLUMES: {
		template: func(id string, _ netip.Addr) x509.Certificate {
			return kubeClient("cairn:volumes:"+id, "cairn:volumes")
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_SERVING: {
		controller: true,
		template: func(id string, addr netip.Addr) x509.Certificate {
			t := pki.Server(id, []net.IP{addr.AsSlice(), net.IPv4(127, 0, 0, 1), kubernetesServiceIP.AsSlice()})
			t.Subject = pkix.Name{CommonName: "kube-apiserver"}
			t.DNSNames = append(t.DNSNames, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local", "localhost")
			return t
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_KUBELET_CLIENT: {
		controller: true,
		template:   func(string, netip.Addr) x509.Certificate { return kubeClient("cairn:apiserver-kubelet-client") },
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_FRONT_PROXY_CLIENT: {
		controller: true,
		frontProxy: true,
		template:   func(string, netip.Addr) x509.Certificate { return kubeClient(kubernetes.FrontProxyClient) },
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_METRICS: {
		controller: true,
		template: func(string, netip.Addr) x509.Certificate {
			t := pki.Peer(kubernetes.MetricsServiceName, nil)
			t.Subject = pkix.Name{CommonName: kubernetes.MetricsUser}
			return t
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_CONTROLLER_MANAGER: {
		controller: true,
		template:   func(string, netip.Addr) x509.Certificate { return kubeClient("system:kube-controller-manager") },
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_SCHEDULER: {
		controller: true,
		template:   func(string, netip.Addr) x509.Certificate { return kubeClient("system:kube-scheduler") },
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_PROXY: {
		controller: true,
		template: func(id string, _ netip.Addr) x509.Certificate {
			return kubeClient("cairn:proxy:"+id, "cairn:proxies")
		},
	},
	api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_RECONCILER: {
		controller: true,
		template:   func(string, netip.Addr) x509.Certificate { return kubeClient("cairn:reconciler", "system:masters") },
	},
}

// kubeClient is the template of a Kubernetes client certificate for user
// in groups.
func kubeClient(user string, groups ...string) x509.Certificate {
	t := pki.Client(user)
	t.Subject.Organization = groups
	return t
}

// parseKubernetesKey parses a PKIX public key of a request: ECDSA P-256 or
// ed25519.
func parseKubernetesKey(der []byte) (crypto.PublicKey, error) {
	if len(der) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no public key to certify")
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the public key is not PKIX DER: %v", err)
	}
	switch k := pub.(type) {
	case ed25519.PublicKey:
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, status.Errorf(codes.InvalidArgument, "the ECDSA key is on %s, want P-256", k.Curve.Params().Name)
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "cannot certify a %T key: want ECDSA P-256 or ed25519", pub)
	}
	return pub, nil
}

// requireKubernetesRole returns the record of node id, refusing it unless
// it is UP and holds KubernetesController (controller) or
// KubernetesWorker.
func (c *curator) requireKubernetesRole(ctx context.Context, id string, controller bool) (*private.Node, error) {
	n, _, err := c.getNode(ctx, id)
	if err != nil {
		return nil, err
	}
	if n.FsmState != api.NodeState_NODE_STATE_UP {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is %s, not UP", id, n.FsmState)
	}
	role, held := "KubernetesWorker", n.GetRoles().GetKubernetesWorker() != nil
	if controller {
		role, held = "KubernetesController", n.GetRoles().GetKubernetesController() != nil
	}
	if !held {
		return nil, status.Errorf(codes.PermissionDenied, "node %s does not hold the %s role", id, role)
	}
	return n, nil
}

// issueKubernetes issues a certificate of kind to node id for the key
// keyDER.
func (c *curator) issueKubernetes(ctx context.Context, id string, kind api.CertificateKind, keyDER []byte) (*api.IssueCertificateResponse, error) {
	k := kubernetesKinds[kind]
	pub, err := parseKubernetesKey(keyDER)
	if err != nil {
		return nil, err
	}
	n, err := c.requireKubernetesRole(ctx, id, k.controller)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddr(n.GetStatus().GetExternalAddress())
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has reported no address to certify: %v", id, err)
	}
	if err := c.checkClock(); err != nil {
		return nil, err
	}
	ca := c.kubeCA
	if k.frontProxy {
		ca = c.frontProxyCA
	}
	cert, caDER, err := c.signWith(ctx, ca, k.template(id, addr), pub, c.opts.kubernetesLifetime)
	if err != nil {
		return nil, err
	}
	return &api.IssueCertificateResponse{Certificate: cert, CaCertificate: caDER}, nil
}

func (a nodeAPI) GetKubernetesServiceAccountKey(ctx context.Context, _ *api.GetKubernetesServiceAccountKeyRequest) (*api.GetKubernetesServiceAccountKeyResponse, error) {
	p, err := nodePeer(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := a.requireKubernetesRole(ctx, p.NodeID, true); err != nil {
		return nil, err
	}
	key, err := a.serviceAccountKey(ctx)
	if err != nil {
		return nil, err
	}
	return &api.GetKubernetesServiceAccountKeyResponse{PrivateKey: key}, nil
}

func (m management) IssueKubernetesCredential(ctx context.Context, req *api.IssueKubernetesCredentialRequest) (*api.IssueKubernetesCredentialResponse, error) {
	pub, err := parseKubernetesKey(req.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := m.checkClock(); err != nil {
		return nil, err
	}
	cert, ca, err := m.signKubernetes(ctx, kubeClient("cairn:owner", "cairn:owners"), pub, m.opts.kubernetesOwnerLifetime)
	if err != nil {
		return nil, err
	}
	nodes, _, err := m.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, n := range nodes {
		addr := n.GetStatus().GetExternalAddress()
		if n.FsmState != api.NodeState_NODE_STATE_UP || n.GetRoles().GetKubernetesController() == nil || addr == "" {
			continue
		}
		eps = append(eps, "https://"+net.JoinHostPort(addr, strconv.Itoa(ports.KubernetesAPI)))
	}
	sort.Strings(eps)
	return &api.IssueKubernetesCredentialResponse{Certificate: cert, CaCertificate: ca, ApiserverEndpoints: eps}, nil
}
