package curator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// heartbeatsKey holds, as one private.Heartbeats, when the leaders last
// heard from each node. Only the leader writes it, once per heartbeat
// interval (keepHeartbeats). Builds before stored a JSON object there,
// which decodeHeartbeats still reads.
const heartbeatsKey = "heartbeats"

// heartbeatTimeout is how long a node may stay silent before it is
// HEARTBEAT_TIMEOUT: two intervals, so that one late or lost beat does not
// count.
func heartbeatTimeout(interval time.Duration) time.Duration { return 2 * interval }

// heartbeatGrace is how long a new leader says UNKNOWN about a node it has
// not heard from yet: one interval, in which every live node that found it
// beats, and a quarter more as slack. It is short because it adds to the
// time a dead leader's node takes to be HEARTBEAT_TIMEOUT: the election
// lease (4 s) plus the grace stays within two heartbeat timeouts.
func heartbeatGrace(interval time.Duration) time.Duration { return interval + interval/4 }

// heartbeats is the leader's record of when it last heard from each node:
// in memory on every beat, and in etcd (heartbeatsKey) once per interval for
// all nodes at once, so that heartbeats cost the cluster one write per
// interval whatever the number of nodes, and a new leader knows when its
// predecessors last heard from a node that is gone.
type heartbeats struct {
	mu sync.Mutex
	// seen is when each node was last heard from, by this leader or, loaded
	// from etcd, by an earlier one.
	seen map[string]time.Time
	// fresh holds the nodes this leader heard from itself.
	fresh map[string]bool
	// since is when this curator took the lead; interval is the heartbeat
	// interval it leads with.
	since    time.Time
	interval time.Duration
	// epoch counts the times this curator took the lead, so that a load or
	// a write begun in one term is not applied in the next.
	epoch int
	// loaded is set once the stored times were read in this term: only
	// then may they be overwritten.
	loaded bool
	// rev is the mod revision of heartbeatsKey as last read or written; 0
	// while it does not exist.
	rev int64
	// dirty is set while seen holds times that are not stored.
	dirty bool
	// view is the judgement of health last published in views, nil before
	// the first term (health.go).
	view  *healthView
	views memory.Value[*healthView]
}

// lead starts a term of leadership at now: what the last term knew is
// dropped, and keepHeartbeats loads what the leaders stored. The term's
// first judgement has every node UNKNOWN.
func (h *heartbeats) lead(now time.Time, interval time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen, h.fresh = map[string]time.Time{}, map[string]bool{}
	h.since, h.interval = now, interval
	h.epoch++
	h.loaded, h.rev, h.dirty = false, 0, false
	h.publish(true, map[string]judgement{})
}

// beat records that node id was heard from now.
func (h *heartbeats) beat(id string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen, h.fresh = map[string]time.Time{}, map[string]bool{}
	}
	if now.After(h.seen[id]) {
		h.seen[id] = now
	}
	h.fresh[id] = true
	h.dirty = true
}

// last says when a leader last heard from node id.
func (h *heartbeats) last(id string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.seen[id]
	return t, ok
}

// remove forgets node id, whose record is gone.
func (h *heartbeats) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.seen[id]; ok {
		delete(h.seen, id)
		delete(h.fresh, id)
		h.dirty = true
	}
}

// health judges node id at now. A node this leader heard from is judged
// by its last beat at once; any other only once the grace of this term has
// passed, by the last beat any leader heard. A node no leader ever heard
// from (one that just committed) is UNKNOWN.
func (h *heartbeats) health(id string, now time.Time) api.NodeHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthLocked(id, now)
}

// healthLocked is health, with h.mu held.
func (h *heartbeats) healthLocked(id string, now time.Time) api.NodeHealth {
	t, ok := h.seen[id]
	switch {
	case !ok, !h.fresh[id] && now.Sub(h.since) < heartbeatGrace(h.interval):
		return api.NodeHealth_NODE_HEALTH_UNKNOWN
	case now.Sub(t) <= heartbeatTimeout(h.interval):
		return api.NodeHealth_NODE_HEALTH_HEALTHY
	}
	return api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT
}

// merge adds times read from etcd at revision rev in term epoch: each node
// keeps the later of the two. Nodes without a record (keep false) are
// left out.
func (h *heartbeats) merge(epoch int, stored map[string]time.Time, rev int64, keep func(id string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if epoch != h.epoch {
		return
	}
	for id, t := range stored {
		if keep != nil && !keep(id) {
			continue
		}
		if t.After(h.seen[id]) {
			h.seen[id] = t
		}
	}
	h.loaded, h.rev = true, rev
}

// rewrite makes the next write of term epoch happen even if no time
// changed: the stored value is not in the current form.
func (h *heartbeats) rewrite(epoch int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if epoch == h.epoch {
		h.dirty = true
	}
}

// toStore returns what there is to write, and the term and revision the
// write depends on; ok is false when there is nothing to write.
func (h *heartbeats) toStore() (seen map[string]time.Time, epoch int, rev int64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.loaded || !h.dirty {
		return nil, 0, 0, false
	}
	h.dirty = false
	return maps.Clone(h.seen), h.epoch, h.rev, true
}

// stored records the outcome of writing what toStore returned: the new
// revision, or, when the write failed, that it is still to be done.
func (h *heartbeats) stored(epoch int, rev int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if epoch != h.epoch {
		return
	}
	if err != nil {
		h.dirty = true
		return
	}
	h.rev = rev
}

// term returns the current term and whether its stored times were loaded.
func (h *heartbeats) term() (epoch int, loaded bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch, h.loaded
}

// keepHeartbeats stores the leader's heartbeat times in etcd: when this
// curator takes the lead it loads what earlier leaders stored, then writes
// all nodes' times in one put per heartbeat interval, if any changed. A
// write conditional on the revision last seen makes a leader that lost
// the lead unnoticed unable to undo a newer leader's write: it reads that
// write instead and merges it. It is a runnable of the election.
func (c *curator) keepHeartbeats(ctx context.Context) error {
	return c.whileLeading(ctx, c.opts.heartbeatInterval, c.syncHeartbeats)
}

// whileLeading calls round at every tick of interval while this curator
// leads, until ctx ends or round fails. It signals the runnable healthy
// first.
func (c *curator) whileLeading(ctx context.Context, interval time.Duration, round func(context.Context) error) error {
	leaders := make(chan leader)
	event.Pipe(ctx, &c.leaders, leaders)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	leading := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l := <-leaders:
			leading = l.Local
		case <-tick.C:
		}
		if !leading {
			continue
		}
		if err := round(ctx); err != nil {
			return err
		}
	}
}

// syncHeartbeats loads the stored times if this term has not yet, or else
// writes the times it has if they changed.
func (c *curator) syncHeartbeats(ctx context.Context) error {
	epoch, loaded := c.heartbeats.term()
	if !loaded {
		return c.loadHeartbeats(ctx, epoch)
	}
	seen, epoch, rev, ok := c.heartbeats.toStore()
	if !ok {
		return nil
	}
	data, err := encodeHeartbeats(seen)
	if err != nil {
		c.heartbeats.stored(epoch, 0, err)
		return err
	}
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(heartbeatsKey), "=", rev)).
		Then(clientv3.OpPut(heartbeatsKey, string(data))).
		Else(clientv3.OpGet(heartbeatsKey)).
		Commit()
	if err != nil {
		err = fmt.Errorf("when storing heartbeat times: %w", err)
		c.heartbeats.stored(epoch, 0, err)
		return err
	}
	if resp.Succeeded {
		c.heartbeats.stored(epoch, resp.Header.Revision, nil)
		return nil
	}
	// Another curator wrote since: take its times, and write again at the
	// next tick.
	c.heartbeats.stored(epoch, 0, errHeartbeatsMoved)
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	stored, rev, rewrite := map[string]time.Time{}, int64(0), false
	if len(kvs) > 0 {
		stored, rewrite = c.decodeStoredHeartbeats(ctx, kvs[0].Value)
		rev = kvs[0].ModRevision
	}
	c.heartbeats.merge(epoch, stored, rev, nil)
	if rewrite {
		c.heartbeats.rewrite(epoch)
	}
	return nil
}

// errHeartbeatsMoved marks a write of heartbeat times that lost to another
// curator's.
var errHeartbeatsMoved = fmt.Errorf("heartbeat times were written by another curator")

// loadHeartbeats reads the stored times at the start of term epoch,
// leaving out nodes that no longer have a record.
func (c *curator) loadHeartbeats(ctx context.Context, epoch int) error {
	resp, err := c.etcd.Txn(ctx).Then(
		clientv3.OpGet(heartbeatsKey),
		clientv3.OpGet(nodePrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return fmt.Errorf("when loading heartbeat times: %w", err)
	}
	stored, rev, rewrite := map[string]time.Time{}, int64(0), false
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		stored, rewrite = c.decodeStoredHeartbeats(ctx, kvs[0].Value)
		rev = kvs[0].ModRevision
	}
	nodes := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		nodes[nodeIDFromKey(kv.Key)] = true
	}
	c.heartbeats.merge(epoch, stored, rev, func(id string) bool { return nodes[id] })
	if rewrite {
		// A cluster upgraded in place: store the times in the current
		// form at the next tick, even if no node beats before it.
		c.heartbeats.rewrite(epoch)
	}
	return nil
}

// decodeStoredHeartbeats reads the value of heartbeatsKey. One that does
// not parse is logged and taken as empty. rewrite says that the value is
// not in the current form, so that the next write should replace it even
// if no time changed.
func (c *curator) decodeStoredHeartbeats(ctx context.Context, data []byte) (seen map[string]time.Time, rewrite bool) {
	seen, legacy, err := decodeHeartbeats(data)
	if err != nil {
		supervisor.Logger(ctx).Warningf("ignoring the stored heartbeat times: %v", err)
		return map[string]time.Time{}, true
	}
	return seen, legacy
}

// encodeHeartbeats is the value of heartbeatsKey for seen: a
// private.Heartbeats, encoded deterministically.
func encodeHeartbeats(seen map[string]time.Time) ([]byte, error) {
	hb := &private.Heartbeats{LastSeenUnixMillis: make(map[string]int64, len(seen))}
	for id, t := range seen {
		hb.LastSeenUnixMillis[id] = t.UnixMilli()
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("when encoding heartbeat times: %w", err)
	}
	return data, nil
}

// decodeHeartbeats reads what encodeHeartbeats wrote, or the JSON object
// ({"<node id>": <unix milliseconds>, ...}) that builds before it stored
// under heartbeatsKey; legacy says it was the latter. The JSON those builds
// wrote never parses as a private.Heartbeats: its first byte, '{', opens a
// group that only a '|' would close. Entries that are not node IDs or
// times after the epoch are dropped.
func decodeHeartbeats(data []byte) (seen map[string]time.Time, legacy bool, err error) {
	hb := &private.Heartbeats{}
	millis := map[string]int64(nil)
	if perr := proto.Unmarshal(data, hb); perr == nil {
		millis = hb.LastSeenUnixMillis
	} else if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := json.Unmarshal(data, &millis); err != nil {
			return nil, false, fmt.Errorf("when decoding heartbeat times stored as JSON: %w", err)
		}
		legacy = true
	} else {
		return nil, false, fmt.Errorf("when decoding heartbeat times: %w", perr)
	}
	seen = make(map[string]time.Time, len(millis))
	for id, ms := range millis {
		if identity.ValidNodeID(id) && ms > 0 {
			seen[id] = time.UnixMilli(ms)
		}
	}
	return seen, legacy, nil
}
