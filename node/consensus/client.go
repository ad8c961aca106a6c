package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
)

// Client is access to the local etcd member, confined to a namespace: every
// key it reads, writes, watches or leases is transparently prefixed with
// the namespace, and keys outside it cannot be reached. Parts of the node
// each take their own with Sub ("curator", "kubernetes", ...), so that they
// cannot trample each other's keys.
//
// Each Client has a watcher and a lease stream of its own: Close ends its
// watches and leases, nothing else. A Client stops working when the
// consensus Service that handed it out stops etcd.
type Client struct {
	clientv3.KV
	clientv3.Watcher
	clientv3.Lease

	raw    *clientv3.Client
	prefix string
}

func newClient(raw *clientv3.Client, prefix string) *Client {
	return &Client{
		KV:      namespace.NewKV(raw.KV, prefix),
		Watcher: &closableWatcher{w: namespace.NewWatcher(clientv3.NewWatcher(raw), prefix)},
		Lease:   namespace.NewLease(clientv3.NewLease(raw), prefix),
		raw:     raw,
		prefix:  prefix,
	}
}

// Sub returns a Client for the namespace space inside c's: its keys are
// stored under c's prefix, then space, then "/". space must be non-empty
// and hold no "/".
func (c *Client) Sub(space string) (*Client, error) {
	if space == "" || strings.Contains(space, "/") {
		return nil, fmt.Errorf("invalid namespace %q", space)
	}
	return newClient(c.raw, c.prefix+space+"/"), nil
}

// Prefix is the prefix c puts before every key, "" for the whole key space.
func (c *Client) Prefix() string { return c.prefix }

// Close ends c's watches and stops keeping its leases alive (they expire
// in their own time). It does not close the connection to etcd, which
// belongs to the Service.
func (c *Client) Close() error {
	return errors.Join(c.Watcher.Close(), c.Lease.Close())
}

// closableWatcher is a Watcher that may be closed while others still start
// watches on it: a gRPC stream that watches through a Client can outlive
// the Client's Close by a moment when its server stops. A watch started
// after Close gets a closed channel, which its caller takes for a watch
// that ended.
type closableWatcher struct {
	w      clientv3.Watcher
	mu     sync.RWMutex
	closed bool
}

func (c *closableWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		ch := make(chan clientv3.WatchResponse)
		close(ch)
		return ch
	}
	return c.w.Watch(ctx, key, opts...)
}

func (c *closableWatcher) RequestProgress(ctx context.Context) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return errors.New("the watcher is closed")
	}
	return c.w.RequestProgress(ctx)
}

func (c *closableWatcher) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.w.Close()
}
