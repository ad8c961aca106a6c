package curator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
)

// newKubeKey returns the PKIX DER of a fresh ECDSA P-256 public key.
func newKubeKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestKubernetesCertificates issues every Kubernetes kind through the real
// curator: refused while the node lacks the role, then issued with the
// subjects, names and usages the components need, by one Kubernetes CA
// apart from the cluster CA, for the configured lifetime.
func TestKubernetesCertificates(t *testing.T) {
	const lifetime = 20 * time.Second
	c := newTestCluster(t, WithKubernetesLifetimes(lifetime, 10*time.Second))
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	me := c.nodes[0].client(t, addr)
	id := c.nodes[0].id()
	mgmt := c.mgmt(t, addr)

	issue := func(kind api.CertificateKind, key []byte) (*x509.Certificate, *x509.Certificate, error) {
		res, err := me.IssueCertificate(ctx, &api.IssueCertificateRequest{Kind: kind, PublicKey: key})
		if err != nil {
			return nil, nil, err
		}
		cert, err := x509.ParseCertificate(res.Certificate)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		ca, err := x509.ParseCertificate(res.CaCertificate)
		if err != nil {
			t.Fatalf("%s CA: %v", kind, err)
		}
		return cert, ca, nil
	}

	// Without the roles, every kind is refused, and so is the service
	// account key.
	for kind, k := range kubernetesKinds {
		_, _, err := issue(kind, newKubeKey(t))
		role := "KubernetesWorker"
		if k.controller {
			role = "KubernetesController"
		}
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), role) {
			t.Errorf("%s without %s = %v, want PermissionDenied naming the role", kind, role, err)
		}
	}
	if _, err := me.GetKubernetesServiceAccountKey(ctx, &api.GetKubernetesServiceAccountKeyRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("GetKubernetesServiceAccountKey without the role = %v, want PermissionDenied", err)
	}
	// A controller needs etcd on its node.
	on := true
	if _, err := mgmt.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: id, ConsensusMember: new(bool), KubernetesController: &on}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("KubernetesController without ConsensusMember = %v, want FailedPrecondition", err)
	}
	if _, err := mgmt.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: id, KubernetesController: &on, KubernetesWorker: &on}); err != nil {
		t.Fatalf("UpdateNodeRoles: %v", err)
	}

	// Bad keys.
	if _, _, err := issue(api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT, nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no key = %v, want InvalidArgument", err)
	}
	if _, _, err := issue(api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT, []byte("garbage")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("garbled key = %v, want InvalidArgument", err)
	}
	if _, _, err := issue(api.CertificateKind_CERTIFICATE_KIND_NODE, newKubeKey(t)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("node certificate with a public key = %v, want InvalidArgument", err)
	}

	var kubeCA *x509.Certificate
	for _, tc := range []struct {
		kind   api.CertificateKind
		cn     string
		groups []string
		usage  x509.ExtKeyUsage
		dns    []string
		ips    []string
	}{
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_CLIENT, "system:node:" + id, []string{"system:nodes"}, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_KUBELET_SERVING, "system:node:" + id, []string{"system:nodes"}, x509.ExtKeyUsageServerAuth, []string{id}, []string{"127.0.0.1"}},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_SERVING, "kube-apiserver", nil, x509.ExtKeyUsageServerAuth,
			[]string{id, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
			[]string{"127.0.0.1", "10.96.0.1"}},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_APISERVER_KUBELET_CLIENT, "cairn:apiserver-kubelet-client", nil, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_CONTROLLER_MANAGER, "system:kube-controller-manager", nil, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_SCHEDULER, "system:kube-scheduler", nil, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_RECONCILER, "cairn:reconciler", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_VOLUMES, "cairn:volumes:" + id, []string{"cairn:volumes"}, x509.ExtKeyUsageClientAuth, nil, nil},
		{api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_PROXY, "cairn:proxy:" + id, []string{"cairn:proxies"}, x509.ExtKeyUsageClientAuth, nil, nil},
	} {
		cert, ca, err := issue(tc.kind, newKubeKey(t))
		if err != nil {
			t.Errorf("%s: %v", tc.kind, err)
			continue
		}
		if kubeCA == nil {
			kubeCA = ca
		} else if !ca.Equal(kubeCA) {
			t.Errorf("%s came with another CA", tc.kind)
		}
		if err := cert.CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s is not signed by the CA it came with: %v", tc.kind, err)
		}
		if cert.Subject.CommonName != tc.cn || !slices.Equal(cert.Subject.Organization, tc.groups) {
			t.Errorf("%s is for %q in %q, want %q in %q", tc.kind, cert.Subject.CommonName, cert.Subject.Organization, tc.cn, tc.groups)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{tc.usage}) {
			t.Errorf("%s has usages %v, want %v", tc.kind, cert.ExtKeyUsage, tc.usage)
		}
		for _, d := range tc.dns {
			if !slices.Contains(cert.DNSNames, d) {
				t.Errorf("%s lacks the name %s: %v", tc.kind, d, cert.DNSNames)
			}
		}
		for _, ip := range tc.ips {
			if !slices.ContainsFunc(cert.IPAddresses, func(a net.IP) bool { return a.Equal(net.ParseIP(ip)) }) {
				t.Errorf("%s lacks the address %s: %v", tc.kind, ip, cert.IPAddresses)
			}
		}
		if life := cert.NotAfter.Sub(cert.NotBefore); life < lifetime || life > lifetime+5*time.Second {
			t.Errorf("%s lives %s, want about %s", tc.kind, life, lifetime)
		}
	}
	if kubeCA != nil && (kubeCA.Subject.CommonName != "Cairn Kubernetes CA" || slices.Equal(kubeCA.Raw, c.ca)) {
		t.Errorf("the Kubernetes CA is %q, want its own CA apart from the cluster CA", kubeCA.Subject.CommonName)
	}

	// The resource metrics API's certificate: the Kubernetes CA's, a
	// client towards the kubelets and the apiserver, and a server under
	// its Service's name, which the aggregation layer checks.
	m, mCA, err := issue(api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_METRICS, newKubeKey(t))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	if kubeCA != nil && !mCA.Equal(kubeCA) {
		t.Error("the metrics certificate came with another CA than the Kubernetes CA")
	}
	if m.Subject.CommonName != "cairn:metrics" || !slices.Equal(m.DNSNames, []string{"cairn-metrics.kube-system.svc"}) ||
		!slices.Equal(m.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("metrics certificate for %q, names %v, usages %v; want cairn:metrics, cairn-metrics.kube-system.svc, server and client",
			m.Subject.CommonName, m.DNSNames, m.ExtKeyUsage)
	}

	// The front proxy client: of a CA of its own, apart from the
	// Kubernetes CA, whose certificates must not speak for other users to
	// aggregated apiservers.
	fp, fpCA, err := issue(api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_FRONT_PROXY_CLIENT, newKubeKey(t))
	if err != nil {
		t.Fatalf("front proxy client: %v", err)
	}
	if err := fp.CheckSignatureFrom(fpCA); err != nil {
		t.Errorf("the front proxy client is not signed by the CA it came with: %v", err)
	}
	if fpCA.Subject.CommonName != "Cairn Kubernetes front proxy CA" || (kubeCA != nil && fpCA.Equal(kubeCA)) || slices.Equal(fpCA.Raw, c.ca) {
		t.Errorf("the front proxy CA is %q, want its own CA apart from the Kubernetes and cluster CAs", fpCA.Subject.CommonName)
	}
	if fp.Subject.CommonName != "cairn:front-proxy-client" || len(fp.Subject.Organization) != 0 ||
		!slices.Equal(fp.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("front proxy client for %q in %q with usages %v, want cairn:front-proxy-client, no group, client auth",
			fp.Subject.CommonName, fp.Subject.Organization, fp.ExtKeyUsage)
	}
	if _, again, err := issue(api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_FRONT_PROXY_CLIENT, newKubeKey(t)); err != nil || !again.Equal(fpCA) {
		t.Errorf("a second front proxy client came with another CA (%v)", err)
	}

	// The owner's credential: the same CA, the owner's group, the
	// controllers' endpoints.
	res, err := mgmt.IssueKubernetesCredential(ctx, &api.IssueKubernetesCredentialRequest{PublicKey: newKubeKey(t)})
	if err != nil {
		t.Fatalf("IssueKubernetesCredential: %v", err)
	}
	owner, err := x509.ParseCertificate(res.Certificate)
	if err != nil {
		t.Fatal(err)
	}
	if kubeCA != nil && owner.CheckSignatureFrom(kubeCA) != nil {
		t.Error("the owner's Kubernetes credential is not of the Kubernetes CA")
	}
	if owner.Subject.CommonName != "cairn:owner" || !slices.Equal(owner.Subject.Organization, []string{"cairn:owners"}) {
		t.Errorf("owner credential for %q in %q", owner.Subject.CommonName, owner.Subject.Organization)
	}
	if want := []string{"https://127.0.0.1:6443"}; !slices.Equal(res.ApiserverEndpoints, want) {
		t.Errorf("apiserver endpoints = %q, want %q", res.ApiserverEndpoints, want)
	}
}

// TestServiceAccountKeyCreatedOnce: calls that race to create the service
// account key all get the same one.
func TestServiceAccountKeyCreatedOnce(t *testing.T) {
	c := newTestCluster(t)
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	on := true
	if _, err := c.mgmt(t, addr).UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: c.nodes[0].id(), KubernetesController: &on}); err != nil {
		t.Fatal(err)
	}
	me := c.nodes[0].client(t, addr)
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			res, err := me.GetKubernetesServiceAccountKey(ctx, &api.GetKubernetesServiceAccountKeyRequest{})
			if err != nil {
				t.Errorf("GetKubernetesServiceAccountKey: %v", err)
				return
			}
			keys[i] = res.PrivateKey
		})
	}
	wg.Wait()
	k, err := x509.ParsePKCS8PrivateKey(keys[0])
	if err != nil {
		t.Fatalf("the service account key is not PKCS #8: %v", err)
	}
	if _, ok := k.(*ecdsa.PrivateKey); !ok {
		t.Errorf("the service account key is a %T, want ECDSA", k)
	}
	for i, key := range keys {
		if !slices.Equal(key, keys[0]) {
			t.Errorf("call %d got another service account key", i)
		}
	}
}
