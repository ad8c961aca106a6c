// Package etcd provides event.Values backed by etcd: a reader of a key, or
// of a range of keys, follows their updates with the same Watch/Get API as
// any other Value, so that code reacting to cluster state does not care
// whether it lives in memory or in etcd.
//
//	etcd ── Get (current state, revision R) ──▶ Watcher ── decode ──▶ Get
//	     ── Watch from R+1 ──────────────────▶  (seen revision)
//	     ── compacted? Get again, resume ────▶
//
// A single key's Watcher behaves like a memory Value's: Get returns the
// newest state it has not returned yet, skipping states that came and went
// while nobody was looking. A range's Watcher returns every key's state
// once (the backlog), then every update of every key in order: skipping
// one key's update because another key changed later would lose state.
//
// # Decoding, and keys that do not exist
//
// A Value is built with a decoder from *mvccpb.KeyValue to T. A key that
// does not exist (never created, or deleted) is handed to it as a KeyValue
// with its Key set and Version 0, so the decoder (or an event.Filter)
// decides what absence means. A decoder error is returned by Get; the
// update is consumed.
//
// # Writing
//
// Set is not supported and panics: writes go through the etcd client,
// where they can fail, be conditional (transactions) and carry a context,
// none of which Set could express.
//
// # Compaction and reconnects
//
// The etcd client resumes a watch across reconnects by itself. When the
// revision a Watcher would resume from has been compacted away, the Watcher
// reads the current state again and returns what changed since it last
// looked: for a key, its current state if it differs; for a range, every
// key whose state differs, deleted keys included.
package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/event"
)

// Client is what a Value needs of an etcd client. Both *clientv3.Client and
// a namespaced client (node/consensus) provide it.
type Client interface {
	clientv3.KV
	clientv3.Watcher
}

// Decoder turns an etcd key's state into a T. A missing key comes as a
// KeyValue with Version 0.
type Decoder[T any] func(kv *mvccpb.KeyValue) (T, error)

// Value is an event.Value[T] that follows a key or a range of keys in etcd.
type Value[T any] struct {
	cl     Client
	key    string
	end    string // empty for a single key
	decode Decoder[T]
}

// NewValue follows the single key key.
func NewValue[T any](cl Client, key string, decode Decoder[T]) *Value[T] {
	return &Value[T]{cl: cl, key: key, decode: decode}
}

// NewRange follows every key k with start <= k < end. For all keys with a
// prefix p, use NewRange(cl, p, clientv3.GetPrefixRangeEnd(p), decode).
func NewRange[T any](cl Client, start, end string, decode Decoder[T]) *Value[T] {
	return &Value[T]{cl: cl, key: start, end: end, decode: decode}
}

// Set is not supported: see the package documentation.
func (v *Value[T]) Set(T) {
	panic("etcd.Value does not support Set: write through the etcd client")
}

// Watch returns a Watcher that has seen nothing yet.
func (v *Value[T]) Watch() event.Watcher[T] {
	ctx, cancel := context.WithCancel(context.Background())
	return &watcher[T]{v: v, ctx: ctx, cancel: cancel}
}

var _ event.Value[int] = &Value[int]{}

// missing is the KeyValue standing for key's absence at revision rev.
func missing(key []byte, rev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: key, ModRevision: rev}
}

// Get implements event.Watcher.
func (w *watcher[T]) Get(ctx context.Context, opts ...event.GetOption[T]) (T, error) {
	var zero T
	o := event.NewGetOptions(opts...)
	for {
		if w.ctx.Err() != nil {
			return zero, event.ErrWatcherClosed
		}
		var kv *mvccpb.KeyValue
		var err error
		if w.v.end == "" {
			kv, err = w.nextKey(ctx, o.BacklogOnly)
		} else {
			kv, err = w.nextInRange(ctx, o.BacklogOnly)
		}
		if err != nil {
			if w.ctx.Err() != nil && !errors.Is(err, event.ErrBacklogDone) {
				return zero, event.ErrWatcherClosed
			}
			return zero, err
		}
		val, err := w.v.decode(kv)
		if err != nil {
			return zero, fmt.Errorf("when decoding %q: %w", kv.Key, err)
		}
		if o.Accepts(val) {
			return val, nil
		}
	}
}

// Close implements event.Watcher.
func (w *watcher[T]) Close() error {
	w.cancel()
	return nil
}
