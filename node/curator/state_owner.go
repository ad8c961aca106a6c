package curator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	etcdvalue "cairn.dev/cairn/pkg/event/etcd"
	"cairn.dev/cairn/pkg/pki"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// The owner's credentials. The cluster trusts one owner key at a time, and
// refuses owner certificates it revoked before they expire; both are the
// owner trust (api.OwnerTrust), one etcd key that every curator's rpc
// server reads at each owner call (rpc.Server.JudgeOwners: a linearizable
// read, so the call after a change is judged by it on every curator) and
// that WatchOwnerTrust streams to the other nodes:
//
//	RotateOwnerKey ──txn──▶ owner/trust ◀──read per call── rpc layer of
//	RevokeOwnerCertificate ──txn──▶ │                       every curator
//	                                └──watch──▶ WatchOwnerTrust ──▶ nodes
//	Escrow, RotateOwnerKey ──issue──▶ pki "owner" ──record──▶ owner/certificates
//
// owner/public_key keeps the key the cluster was bootstrapped with, which
// Bootstrap compares when it runs again; until the first curator has
// created owner/trust from it (ensureOwnerTrust, at start),
// readOwnerTrust reads it in its place.
const (
	// ownerTrustKey holds the api.OwnerTrust.
	ownerTrustKey = "owner/trust"
	// ownerCertificatesKey holds the private.OwnerCertificates the
	// curator issued and that have not expired.
	ownerCertificatesKey = "owner/certificates"
)

// ownerWriteAttempts bounds how often a write of the owner's state is
// tried again when another one came in between.
const ownerWriteAttempts = 5

// newOwnerTrustValue follows the owner trust in etcd through cl, the
// curator's namespace. A missing key reads as nil.
func newOwnerTrustValue(cl etcdvalue.Client) event.Watchable[*api.OwnerTrust] {
	return etcdvalue.NewValue(cl, ownerTrustKey, decodeOwnerTrust)
}

// decodeOwnerTrust decodes the owner trust key; a missing key is nil.
func decodeOwnerTrust(kv *mvccpb.KeyValue) (*api.OwnerTrust, error) {
	if kv.Version == 0 {
		return nil, nil
	}
	t := &api.OwnerTrust{}
	if err := proto.Unmarshal(kv.Value, t); err != nil {
		return nil, fmt.Errorf("when decoding the owner trust: %w", err)
	}
	if len(t.OwnerPublicKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the stored owner trust holds a %d-byte owner key", len(t.OwnerPublicKey))
	}
	return t, nil
}

// ensureOwnerTrust creates the owner trust from the bootstrap owner key
// when the cluster has none yet, then is done. It is a child runnable of
// the curator, so that a curator without etcd quorum serves all the same.
func (c *curator) ensureOwnerTrust(ctx context.Context) error {
	if err := c.createOwnerTrust(ctx); err != nil {
		// Also when etcd holds no cluster yet (FailedPrecondition): on a
		// node, Bootstrap runs before the curator; the supervisor tries
		// again after a while.
		return err
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	supervisor.Signal(ctx, supervisor.SignalDone)
	return nil
}

// ownerTrustWait is how long a starting curator waits for etcd to create
// the owner trust of a new cluster before it serves anyway.
const ownerTrustWait = 5 * time.Second

// createOwnerTrust stores the owner trust made of the bootstrap owner key
// when the cluster has none yet.
func (c *curator) createOwnerTrust(ctx context.Context) error {
	t, rev, err := c.readOwnerTrust(ctx)
	if err != nil {
		return err
	}
	if rev == 0 {
		if _, err := c.putOwnerTrust(ctx, t, 0); err != nil {
			return err
		}
	}
	return nil
}

// readOwnerTrust reads the owner trust and the revision that last wrote
// it: 0 when no curator created it yet, in which case it is made of the
// bootstrap owner key alone.
func (c *curator) readOwnerTrust(ctx context.Context) (*api.OwnerTrust, int64, error) {
	resp, err := c.etcd.Txn(ctx).Then(clientv3.OpGet(ownerTrustKey), clientv3.OpGet(ownerKey)).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the owner trust: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		t, err := decodeOwnerTrust(kvs[0])
		if err != nil {
			return nil, 0, err
		}
		return t, kvs[0].ModRevision, nil
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, 0, status.Error(codes.FailedPrecondition, "the cluster has no owner key: it was not bootstrapped")
	}
	return &api.OwnerTrust{OwnerPublicKey: kvs[0].Value}, 0, nil
}

// putOwnerTrust stores t if the owner trust is still the one of revision
// rev (0: none), and says whether it was.
func (c *curator) putOwnerTrust(ctx context.Context, t *api.OwnerTrust, rev int64) (bool, error) {
	b, err := proto.Marshal(t)
	if err != nil {
		return false, fmt.Errorf("when encoding the owner trust: %w", err)
	}
	return c.putAt(ctx, ownerTrustKey, b, rev, "the owner trust")
}

// updateOwnerTrust applies change to the owner trust and stores the
// result, reading again when another write came in between. change
// returns errUnchanged to store nothing.
func (c *curator) updateOwnerTrust(ctx context.Context, change func(t *api.OwnerTrust) error) (*api.OwnerTrust, error) {
	for range ownerWriteAttempts {
		t, rev, err := c.readOwnerTrust(ctx)
		if err != nil {
			return nil, err
		}
		t = proto.Clone(t).(*api.OwnerTrust)
		t.Revoked = unexpiredRevocations(t.Revoked, time.Now())
		err = change(t)
		if errors.Is(err, errUnchanged) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		ok, err := c.putOwnerTrust(ctx, t, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			return t, nil
		}
	}
	return nil, status.Error(codes.Aborted, "the owner trust kept changing while it was being updated; retry")
}

// unexpiredRevocations drops the revocations of certificates that expired
// before now: the TLS handshake refuses those anyway.
func unexpiredRevocations(revoked []*api.RevokedOwnerCertificate, now time.Time) []*api.RevokedOwnerCertificate {
	return slices.DeleteFunc(slices.Clone(revoked), func(r *api.RevokedOwnerCertificate) bool {
		return r.NotAfterUnixNanos <= now.UnixNano()
	})
}

// isRevoked says whether t revokes serial.
func isRevoked(t *api.OwnerTrust, serial []byte) bool {
	return slices.ContainsFunc(t.GetRevoked(), func(r *api.RevokedOwnerCertificate) bool {
		return bytes.Equal(r.Serial, serial)
	})
}

// issueOwnerCertificate returns an owner certificate for key, the owner
// key of t, and the CA certificate, DER: the stored one while it is fresh
// (pki.Certificate.EnsureFresh), else a new one, also when the stored one
// is revoked or for another key (the key was rotated). It records what it
// returns in owner/certificates.
func (c *curator) issueOwnerCertificate(ctx context.Context, key ed25519.PublicKey, t *api.OwnerTrust) (certDER, caDER []byte, err error) {
	if err := c.checkClock(); err != nil {
		return nil, nil, err
	}
	want := ownerCertificate(c.ca, key, c.opts.ownerLifetime)
	certDER, caDER, err = issue(ctx, c.root, c.ca, want)
	if errors.Is(err, pki.ErrKeyMismatch) {
		certDER, err = want.Reissue(ctx, c.root)
	}
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, nil, fmt.Errorf("when parsing the owner certificate: %w", err)
	}
	if isRevoked(t, cert.SerialNumber.Bytes()) {
		if certDER, err = want.Reissue(ctx, c.root); err != nil {
			return nil, nil, err
		}
		if cert, err = x509.ParseCertificate(certDER); err != nil {
			return nil, nil, fmt.Errorf("when parsing the owner certificate: %w", err)
		}
	}
	if caDER == nil {
		if caDER, err = c.ca.Ensure(ctx, c.root); err != nil {
			return nil, nil, fmt.Errorf("when loading the cluster CA: %w", err)
		}
	}
	if err := c.recordOwnerCertificate(ctx, cert); err != nil {
		return nil, nil, err
	}
	return certDER, caDER, nil
}

// ownerCertificates reads the record of issued owner certificates and the
// revision that last wrote it (0: none).
func (c *curator) ownerCertificates(ctx context.Context) (*private.OwnerCertificates, int64, error) {
	resp, err := c.etcd.Get(ctx, ownerCertificatesKey)
	if err != nil {
		return nil, 0, fmt.Errorf("when reading the owner certificates: %w", err)
	}
	rec := &private.OwnerCertificates{}
	if len(resp.Kvs) == 0 {
		return rec, 0, nil
	}
	if err := proto.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
		return nil, 0, fmt.Errorf("when decoding the owner certificates: %w", err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// recordOwnerCertificate adds cert to the record of issued owner
// certificates, unless it is there, and drops those that expired.
func (c *curator) recordOwnerCertificate(ctx context.Context, cert *x509.Certificate) error {
	entry := &api.OwnerCertificate{
		Serial:             cert.SerialNumber.Bytes(),
		OwnerPublicKey:     cert.PublicKey.(ed25519.PublicKey),
		NotBeforeUnixNanos: cert.NotBefore.UnixNano(),
		NotAfterUnixNanos:  cert.NotAfter.UnixNano(),
	}
	sameSerial := func(o *api.OwnerCertificate) bool { return bytes.Equal(o.Serial, entry.Serial) }
	for range ownerWriteAttempts {
		rec, rev, err := c.ownerCertificates(ctx)
		if err != nil {
			return err
		}
		now, had := time.Now().UnixNano(), len(rec.Certificates)
		kept := slices.DeleteFunc(rec.Certificates, func(o *api.OwnerCertificate) bool { return o.NotAfterUnixNanos <= now })
		known := slices.ContainsFunc(kept, sameSerial)
		if known && len(kept) == had {
			return nil
		}
		if !known {
			kept = append(kept, entry)
		}
		b, err := proto.Marshal(&private.OwnerCertificates{Certificates: kept})
		if err != nil {
			return fmt.Errorf("when encoding the owner certificates: %w", err)
		}
		resp, err := c.etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(ownerCertificatesKey), "=", rev)).
			Then(clientv3.OpPut(ownerCertificatesKey, string(b))).
			Commit()
		if err != nil {
			return fmt.Errorf("when recording owner certificate %s: %w", rpc.FormatSerial(entry.Serial), err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return status.Error(codes.Aborted, "the record of owner certificates kept changing; retry")
}
