package pki

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"math/big"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CRLValidity is how long a CRL from Certificate.CRL claims to be current
// (its NextUpdate). Consumers are expected to follow revocations as they
// happen (see RevocationPrefix) rather than poll on NextUpdate.
const CRLValidity = 7 * 24 * time.Hour

// Revoke records that the certificate with the given serial, issued by the
// CA c, is revoked as of now. Revoking a serial twice keeps the first time.
func (c *Certificate) Revoke(ctx context.Context, kv clientv3.KV, serial *big.Int) error {
	if err := c.validate(); err != nil {
		return err
	}
	if serial == nil || serial.Sign() <= 0 {
		return fmt.Errorf("invalid serial %v", serial)
	}
	key := c.RevocationPrefix() + serial.Text(16)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	_, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, now)).
		Commit()
	if err != nil {
		return fmt.Errorf("when revoking %x: %w", serial, err)
	}
	return nil
}

// RevocationPrefix is the etcd key prefix under which the revocations of
// certificates issued by c are stored, one key per serial. Watch it to learn
// when the CRL changes.
func (c *Certificate) RevocationPrefix() string {
	return c.Namespace.revokedPrefix(c.Name)
}

// CRL returns a CRL signed by the CA c listing every serial revoked through
// c, in DER. Its number is the etcd revision of the latest revocation, so it
// grows with every revocation and is the same for the same set of them.
func (c *Certificate) CRL(ctx context.Context, kv clientv3.KV) ([]byte, error) {
	caCert, err := c.X509(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("when ensuring CA: %w", err)
	}
	key, err := c.PrivateKey(ctx, kv)
	if err != nil {
		return nil, err
	}
	resp, err := kv.Get(ctx, c.RevocationPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("when reading revocations: %w", err)
	}
	return SignCRL(caCert, key, resp.Kvs)
}

// SignCRL builds and signs a CRL from revocation entries as stored under
// RevocationPrefix, for callers that follow that prefix themselves.
func SignCRL(caCert *x509.Certificate, key ed25519.PrivateKey, kvs []*mvccpb.KeyValue) ([]byte, error) {
	entries, number, err := parseRevocations(kvs)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.RevocationList{
		RevokedCertificateEntries: entries,
		Number:                    big.NewInt(number),
		ThisUpdate:                now.Add(-clockSkew),
		NextUpdate:                now.Add(CRLValidity),
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, caCert, key)
	if err != nil {
		return nil, fmt.Errorf("when signing CRL: %w", err)
	}
	return der, nil
}

// parseRevocations turns stored revocations into CRL entries, and returns
// the highest revision among them (at least 1) as the CRL number.
func parseRevocations(kvs []*mvccpb.KeyValue) ([]x509.RevocationListEntry, int64, error) {
	number := int64(1)
	entries := make([]x509.RevocationListEntry, 0, len(kvs))
	for _, kv := range kvs {
		key := string(kv.Key)
		hex := key[strings.LastIndex(key, "/")+1:]
		serial, ok := new(big.Int).SetString(hex, 16)
		if !ok || serial.Sign() <= 0 {
			return nil, 0, fmt.Errorf("revocation %q: invalid serial", key)
		}
		at, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil {
			return nil, 0, fmt.Errorf("revocation %q: %w", key, err)
		}
		entries = append(entries, x509.RevocationListEntry{SerialNumber: serial, RevocationTime: at})
		number = max(number, kv.ModRevision)
	}
	return entries, number, nil
}
