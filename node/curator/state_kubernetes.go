package curator

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/pki"
)

// KubernetesPKINamespace is where the Kubernetes CA is kept in etcd. It
// lies outside the apiserver's prefix ("kubernetes/"), which the apiserver
// alone may reach.
var KubernetesPKINamespace = &pki.Namespace{Prefix: "kubernetes-pki/"}

// kubernetesCA describes the cluster's Kubernetes CA, created on first use.
func kubernetesCA() *pki.Certificate {
	return &pki.Certificate{
		Namespace: KubernetesPKINamespace,
		Issuer:    pki.SelfSigned,
		Name:      "ca",
		Template:  pki.CA("Cairn Kubernetes CA"),
		Mode:      pki.ManagedKey,
	}
}

// frontProxyCA describes the CA of the aggregation layer's front proxy,
// created on first use. The apiserver proxies requests to aggregated
// apiservers (metrics-server, say) with a client certificate of this CA
// and the caller's name in request headers, and those apiservers believe
// the headers of whoever holds one. A CA of its own keeps that trust apart
// from the Kubernetes CA's: no kubelet, controller or owner certificate
// can speak for another user to them.
func frontProxyCA() *pki.Certificate {
	return &pki.Certificate{
		Namespace: KubernetesPKINamespace,
		Issuer:    pki.SelfSigned,
		Name:      "front-proxy-ca",
		Template:  pki.CA("Cairn Kubernetes front proxy CA"),
		Mode:      pki.ManagedKey,
	}
}

// serviceAccountKeyKey is the etcd key (in the curator's namespace) of the
// service account signing key, PKCS #8 DER.
const serviceAccountKeyKey = "kubernetes/service-account-key"

// signKubernetes signs tmpl for pub with the Kubernetes CA, creating the
// CA on first use, and returns the certificate and the CA's, DER.
func (c *curator) signKubernetes(ctx context.Context, tmpl x509.Certificate, pub crypto.PublicKey, lifetime time.Duration) (cert, caDER []byte, err error) {
	return c.signWith(ctx, c.kubeCA, tmpl, pub, lifetime)
}

// signWith signs tmpl for pub with ca, creating ca on first use, and
// returns the certificate and ca's, DER.
func (c *curator) signWith(ctx context.Context, ca *pki.Certificate, tmpl x509.Certificate, pub crypto.PublicKey, lifetime time.Duration) (cert, caDER []byte, err error) {
	caDER, err = ca.Ensure(ctx, c.root)
	if err != nil {
		return nil, nil, fmt.Errorf("when loading the CA %s: %w", ca.Name, err)
	}
	cert, err = ca.Sign(ctx, c.root, tmpl, pub, lifetime)
	if err != nil {
		return nil, nil, fmt.Errorf("when issuing a Kubernetes certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	return cert, caDER, nil
}

// serviceAccountKey returns the service account signing key, creating it
// first if the cluster has none: the first key stored wins, so that
// curators racing to create it all return the same one.
func (c *curator) serviceAccountKey(ctx context.Context) ([]byte, error) {
	res, err := c.etcd.Get(ctx, serviceAccountKeyKey)
	if err != nil {
		return nil, fmt.Errorf("when reading the service account key: %w", err)
	}
	if len(res.Kvs) == 1 {
		return res.Kvs[0].Value, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating the service account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("when encoding the service account key: %w", err)
	}
	txn, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(serviceAccountKeyKey), "=", 0)).
		Then(clientv3.OpPut(serviceAccountKeyKey, string(der))).
		Else(clientv3.OpGet(serviceAccountKeyKey)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("when storing the service account key: %w", err)
	}
	if txn.Succeeded {
		return der, nil
	}
	kvs := txn.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("the service account key vanished while it was being created")
	}
	return kvs[0].Value, nil
}
