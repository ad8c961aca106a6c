package pki

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/etcd"
)

// CRLWatcher follows the CRL of a CA: its Get returns a freshly signed CRL
// the first time, then again each time a certificate is revoked.
type CRLWatcher struct {
	ca      *Certificate
	kv      clientv3.KV
	w       event.Watcher[*mvccpb.KeyValue]
	revoked map[string]*mvccpb.KeyValue
	started bool
}

// WatchCRL returns a CRLWatcher for the CA c. Close it when done.
func (c *Certificate) WatchCRL(cl etcd.Client) *CRLWatcher {
	prefix := c.RevocationPrefix()
	v := etcd.NewRange(cl, prefix, clientv3.GetPrefixRangeEnd(prefix), func(kv *mvccpb.KeyValue) (*mvccpb.KeyValue, error) {
		return kv, nil
	})
	return &CRLWatcher{ca: c, kv: cl, w: v.Watch(), revoked: make(map[string]*mvccpb.KeyValue)}
}

// Get returns the CA's CRL, DER: the current one on the first call, then
// blocks until the revocations change and returns the new one.
func (w *CRLWatcher) Get(ctx context.Context) ([]byte, error) {
	if w.started {
		kv, err := w.w.Get(ctx)
		if err != nil {
			return nil, err
		}
		w.apply(kv)
	}
	// Take in whatever else is already known, then sign once.
	for {
		kv, err := w.w.Get(ctx, event.BacklogOnly[*mvccpb.KeyValue]())
		if errors.Is(err, event.ErrBacklogDone) {
			break
		}
		if err != nil {
			return nil, err
		}
		w.apply(kv)
	}
	w.started = true
	caCert, err := w.ca.X509(ctx, w.kv)
	if err != nil {
		return nil, fmt.Errorf("when reading CA: %w", err)
	}
	key, err := w.ca.PrivateKey(ctx, w.kv)
	if err != nil {
		return nil, err
	}
	kvs := make([]*mvccpb.KeyValue, 0, len(w.revoked))
	for _, kv := range w.revoked {
		kvs = append(kvs, kv)
	}
	sort.Slice(kvs, func(i, j int) bool { return string(kvs[i].Key) < string(kvs[j].Key) })
	return SignCRL(caCert, key, kvs)
}

func (w *CRLWatcher) apply(kv *mvccpb.KeyValue) {
	if kv.Version == 0 {
		delete(w.revoked, string(kv.Key))
		return
	}
	w.revoked[string(kv.Key)] = kv
}

// Close releases the watcher.
func (w *CRLWatcher) Close() error { return w.w.Close() }
