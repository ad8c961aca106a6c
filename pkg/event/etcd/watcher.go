package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/event"
)

// rewatchDelay is how long a Watcher waits before watching again after the
// etcd client reported an error on a watch (other than compaction), so that
// a broken connection does not make it spin.
const rewatchDelay = 250 * time.Millisecond

// watcher is the event.Watcher of a Value. It is used from one goroutine;
// only Close may come from another, and touches nothing but ctx.
type watcher[T any] struct {
	v *Value[T]
	// ctx lives until Close; every etcd call and watch derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	started bool
	// rev is the revision up to which this watcher has read etcd: the
	// watch resumes at rev+1.
	rev int64
	wch clientv3.WatchChan
	// wcancel ends the current watch.
	wcancel context.CancelFunc

	// Single key: the state last returned.
	lastExists bool
	lastMod    int64

	// Range: states not returned yet, oldest first, and the ModRevision of
	// every key known to exist.
	queue []*mvccpb.KeyValue
	known map[string]int64
}

// read gets the current state of the key or range; a watch started after
// it begins at the revision of that state.
func (w *watcher[T]) read(ctx context.Context) (*clientv3.GetResponse, error) {
	ctx, cancel := w.both(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if w.v.end != "" {
		opts = append(opts, clientv3.WithRange(w.v.end))
	}
	resp, err := w.v.cl.Get(ctx, w.v.key, opts...)
	if err != nil {
		return nil, fmt.Errorf("when reading %q: %w", w.v.key, err)
	}
	w.rev = resp.Header.Revision
	return resp, nil
}

// currentKey is the watched key as resp shows it, or a placeholder for a
// key that does not exist.
func (w *watcher[T]) currentKey(resp *clientv3.GetResponse) *mvccpb.KeyValue {
	if len(resp.Kvs) == 1 {
		return resp.Kvs[0]
	}
	return missing([]byte(w.v.key), 0)
}

// both is a context done when ctx or the watcher is.
func (w *watcher[T]) both(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(w.ctx, cancel)
	return c, func() { stop(); cancel() }
}

// nextKey returns the next state of a single key.
func (w *watcher[T]) nextKey(ctx context.Context, backlogOnly bool) (*mvccpb.KeyValue, error) {
	if !w.started || backlogOnly {
		resp, err := w.read(ctx)
		if err != nil {
			return nil, err
		}
		w.stopWatch()
		kv := w.currentKey(resp)
		if !w.started || w.changed(kv) {
			w.started = true
			return w.remember(kv), nil
		}
		return nil, event.ErrBacklogDone
	}
	for {
		events, err := w.receive(ctx)
		if err != nil {
			return nil, err
		}
		if events == nil {
			// Compacted: compare with the current state.
			resp, err := w.read(ctx)
			if err != nil {
				return nil, err
			}
			if kv := w.currentKey(resp); w.changed(kv) {
				return w.remember(kv), nil
			}
			continue
		}
		// Newest state only: skip what is already out of date, and
		// whatever else the client has buffered.
		last := events[len(events)-1]
		for more := w.drain(); len(more) > 0; more = w.drain() {
			last = more[len(more)-1]
		}
		return w.remember(eventKV(last)), nil
	}
}

func (w *watcher[T]) changed(kv *mvccpb.KeyValue) bool {
	exists := kv.Version != 0
	return exists != w.lastExists || exists && kv.ModRevision != w.lastMod
}

func (w *watcher[T]) remember(kv *mvccpb.KeyValue) *mvccpb.KeyValue {
	w.lastExists = kv.Version != 0
	w.lastMod = kv.ModRevision
	return kv
}

// nextInRange returns the next update of a key in the range.
func (w *watcher[T]) nextInRange(ctx context.Context, backlogOnly bool) (*mvccpb.KeyValue, error) {
	if !w.started {
		resp, err := w.read(ctx)
		if err != nil {
			return nil, err
		}
		w.started = true
		w.known = make(map[string]int64)
		w.resync(resp)
	}
	for {
		if len(w.queue) > 0 {
			kv := w.queue[0]
			w.queue = w.queue[1:]
			return kv, nil
		}
		if backlogOnly {
			return nil, event.ErrBacklogDone
		}
		events, err := w.receive(ctx)
		if err != nil {
			return nil, err
		}
		if events == nil {
			resp, err := w.read(ctx)
			if err != nil {
				return nil, err
			}
			w.resync(resp)
			continue
		}
		for _, ev := range events {
			kv := eventKV(ev)
			if kv.Version == 0 {
				delete(w.known, string(kv.Key))
			} else {
				w.known[string(kv.Key)] = kv.ModRevision
			}
			w.queue = append(w.queue, kv)
		}
	}
}

// resync queues every difference between the known keys and resp.
func (w *watcher[T]) resync(resp *clientv3.GetResponse) {
	present := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = true
		if mod, ok := w.known[string(kv.Key)]; !ok || mod != kv.ModRevision {
			w.queue = append(w.queue, kv)
			w.known[string(kv.Key)] = kv.ModRevision
		}
	}
	for key := range w.known {
		if !present[key] {
			w.queue = append(w.queue, missing([]byte(key), resp.Header.Revision))
			delete(w.known, key)
		}
	}
}

// receive waits for the next watch response with events, watching anew as
// needed. It returns nil events when the watch's start was compacted away:
// the caller must read the current state.
func (w *watcher[T]) receive(ctx context.Context) ([]*clientv3.Event, error) {
	for {
		if w.wch == nil {
			w.startWatch()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("when waiting for %q: %w", w.v.key, ctx.Err())
		case <-w.ctx.Done():
			return nil, event.ErrWatcherClosed
		case resp, ok := <-w.wch:
			events, err := w.handle(resp, ok)
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil, nil
			}
			if err != nil {
				if err := w.pause(ctx); err != nil {
					return nil, err
				}
				continue
			}
			if len(events) > 0 {
				return events, nil
			}
		}
	}
}

// drain returns the events of watch responses already waiting, without
// blocking. On any trouble it stops; receive deals with it later.
func (w *watcher[T]) drain() []*clientv3.Event {
	if w.wch == nil {
		return nil
	}
	select {
	case resp, ok := <-w.wch:
		events, err := w.handle(resp, ok)
		if err != nil {
			return nil
		}
		return events
	default:
		return nil
	}
}

// handle digests one watch response: it advances rev past its events, or
// ends the watch when the response is an error or the channel closed.
func (w *watcher[T]) handle(resp clientv3.WatchResponse, ok bool) ([]*clientv3.Event, error) {
	if !ok {
		w.stopWatch()
		return nil, errors.New("watch ended")
	}
	if resp.CompactRevision != 0 {
		w.stopWatch()
		return nil, rpctypes.ErrCompacted
	}
	if err := resp.Err(); err != nil {
		w.stopWatch()
		return nil, err
	}
	if resp.Canceled {
		w.stopWatch()
		return nil, errors.New("watch canceled")
	}
	if n := len(resp.Events); n > 0 {
		w.rev = resp.Events[n-1].Kv.ModRevision
	}
	return resp.Events, nil
}

func (w *watcher[T]) startWatch() {
	wctx, cancel := context.WithCancel(w.ctx)
	opts := []clientv3.OpOption{clientv3.WithRev(w.rev + 1)}
	if w.v.end != "" {
		opts = append(opts, clientv3.WithRange(w.v.end))
	}
	w.wch = w.v.cl.Watch(wctx, w.v.key, opts...)
	w.wcancel = cancel
}

func (w *watcher[T]) stopWatch() {
	if w.wcancel != nil {
		w.wcancel()
	}
	w.wch, w.wcancel = nil, nil
}

// pause waits rewatchDelay, or less if ctx or the watcher end first.
func (w *watcher[T]) pause(ctx context.Context) error {
	t := time.NewTimer(rewatchDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("when waiting for %q: %w", w.v.key, ctx.Err())
	case <-w.ctx.Done():
		return event.ErrWatcherClosed
	case <-t.C:
		return nil
	}
}

// eventKV is the state an event leaves its key in.
func eventKV(ev *clientv3.Event) *mvccpb.KeyValue {
	if ev.Type == clientv3.EventTypeDelete {
		return missing(ev.Kv.Key, ev.Kv.ModRevision)
	}
	return ev.Kv
}
