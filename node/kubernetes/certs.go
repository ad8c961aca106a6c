package kubernetes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	api "cairn.dev/cairn/proto/api"
)

// A credential is a key of this node and its certificate of the Kubernetes
// CA, as PEM files a component reads.
type credential struct {
	// Cert, Key and CA are the paths of the certificate, its private key
	// and the Kubernetes CA's certificate.
	Cert, Key, CA string
	// renewAt is half-way through the certificate's life: the component
	// that uses it is started again with a fresh one then.
	renewAt time.Time
}

// issue draws a fresh ECDSA P-256 key, has the curator certify it as kind,
// and writes dir/name.key, dir/name.crt and dir/ca.crt. The key never
// leaves the node: the curator sees only its public half, and decides the
// certificate's names from its own record of the node.
func issue(ctx context.Context, cur api.CuratorClient, kind api.CertificateKind, dir, name string) (*credential, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating the %s key: %w", name, err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("when encoding the %s public key: %w", name, err)
	}
	res, err := cur.IssueCertificate(ctx, &api.IssueCertificateRequest{Kind: kind, PublicKey: pub})
	if err != nil {
		return nil, fmt.Errorf("when asking the curator for a %s certificate: %w", kind, err)
	}
	cert, err := x509.ParseCertificate(res.Certificate)
	if err != nil {
		return nil, fmt.Errorf("when parsing the %s certificate: %w", kind, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("when encoding the %s key: %w", name, err)
	}
	c := &credential{
		Cert:    filepath.Join(dir, name+".crt"),
		Key:     filepath.Join(dir, name+".key"),
		CA:      filepath.Join(dir, "ca.crt"),
		renewAt: cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2),
	}
	if err := writePEMs(dir, []pemFile{
		{c.Key, "PRIVATE KEY", keyDER, 0o600},
		{c.Cert, "CERTIFICATE", res.Certificate, 0o644},
		{c.CA, "CERTIFICATE", res.CaCertificate, 0o644},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// A pemFile is one PEM block to write, and the file's permissions.
type pemFile struct {
	path, kind string
	der        []byte
	perm       os.FileMode
}

// writePEMs creates dir and writes each file into it.
func writePEMs(dir string, files []pemFile) error {
	if err := mkdirs(dir); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.perm); err != nil {
			return err
		}
	}
	return nil
}

// loopbackServing writes dir/serving.key and dir/serving.crt: a fresh
// ECDSA P-256 key and a certificate it signs itself for 127.0.0.1 and
// localhost, valid until notAfter, for a component's HTTPS port on the
// loopback (the controller-manager's, the scheduler's). Given none, each
// makes itself an RSA-2048 key at every start, which takes seconds of an
// emulated CPU while the controller starts. Nothing of Cairn's calls
// those ports; they serve the components' health and metrics endpoints
// on the loopback.
func loopbackServing(dir string, notAfter time.Time) (cert, key string, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("when generating a serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", fmt.Errorf("when drawing a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return "", "", fmt.Errorf("when signing the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", fmt.Errorf("when encoding the serving key: %w", err)
	}
	cert, key = filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := writePEMs(dir, []pemFile{{key, "PRIVATE KEY", keyDER, 0o600}, {cert, "CERTIFICATE", der, 0o644}}); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

// issueKubeconfig issues a client credential of kind into dir and writes
// dir/kubeconfig, with which a component reaches the apiserver at server;
// it returns the credential, whose renewAt ends the component's run, and
// the kubeconfig's path.
func issueKubeconfig(ctx context.Context, cur api.CuratorClient, kind api.CertificateKind, dir, server string) (*credential, string, error) {
	cred, err := issue(ctx, cur, kind, dir, "client")
	if err != nil {
		return nil, "", err
	}
	kubeconfig := dir + "/kubeconfig"
	if err := writeKubeconfig(kubeconfig, server, cred); err != nil {
		return nil, "", err
	}
	return cred, kubeconfig, nil
}

// issueClient issues a client credential of kind into dir and returns a
// client of the apiserver at server that presents it, and the credential,
// whose renewAt ends the client's use.
func issueClient(ctx context.Context, cur api.CuratorClient, kind api.CertificateKind, dir, server string) (*apiClient, *credential, error) {
	cred, err := issue(ctx, cur, kind, dir, "client")
	if err != nil {
		return nil, nil, err
	}
	cl, err := newAPIClient(server, cred)
	if err != nil {
		return nil, nil, err
	}
	return cl, cred, nil
}

// soonest returns the earliest renewal time of creds.
func soonest(creds ...*credential) time.Time {
	var t time.Time
	for _, c := range creds {
		if t.IsZero() || c.renewAt.Before(t) {
			t = c.renewAt
		}
	}
	return t
}
