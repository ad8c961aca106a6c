package curator

import (
	"context"
	"maps"
	"slices"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
)

// A node's health changes without a write to etcd: it turns
// HEARTBEAT_TIMEOUT as time passes, HEALTHY again with a beat. So that
// Watch streams tell it, the leader judges every node it has heard of once
// per healthTick, with the rules GetNodes uses, and publishes the
// judgement when it changed; each node Watch stream follows it beside its
// etcd watch:
//
//	beat ──▶ heartbeats.seen ◀── judgeHealth: every healthTick, one scan
//	                                 │ changed? publish a new healthView
//	                                 ▼
//	                         heartbeats.views ──▶ each node Watch stream:
//	                                              read the nodes that changed
//	                                              at the revision it sent, send
//
// One ticker serves every stream, and a judgement that changed nothing
// wakes none. A view names, for each node, the judgement that last changed
// it, so that a stream keeps one number, not a copy of every node: the
// nodes changed since the view it sent with are the ones to send again.

// healthTick is how often the leader judges health for Watch streams: a
// stream tells a change at most a quarter interval after GetNodes would.
func healthTick(interval time.Duration) time.Duration { return interval / 4 }

// healthView is one judgement of the health of every node the leader
// heard of. It is never modified once published.
type healthView struct {
	// leading is false once the curator stopped leading: its judgement is
	// stale from then on, and streams following it end.
	leading bool
	// term is the term of leadership (heartbeats.epoch) it was judged in.
	term int
	// seq numbers the views this curator published; it only grows.
	seq uint64
	// nodes are the nodes judged; any other is UNKNOWN.
	nodes map[string]judgement
}

// judgement is the health of one node, and the view that judged it so
// first.
type judgement struct {
	health  api.NodeHealth
	changed uint64
}

// health is the judged health of node id.
func (v *healthView) health(id string) api.NodeHealth {
	if j, ok := v.nodes[id]; ok {
		return j.health
	}
	return api.NodeHealth_NODE_HEALTH_UNKNOWN
}

// changedSince lists, in order, the nodes whose health changed after view
// seq.
func (v *healthView) changedSince(seq uint64) []string {
	var ids []string
	for id, j := range v.nodes {
		if j.changed > seq {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// publish publishes a new view of nodes, with h.mu held.
func (h *heartbeats) publish(leading bool, nodes map[string]judgement) {
	seq := uint64(1)
	if h.view != nil {
		seq = h.view.seq + 1
	}
	h.view = &healthView{leading: leading, term: h.epoch, seq: seq, nodes: nodes}
	h.views.Set(h.view)
}

// currentView returns the judgement last published, nil before the first
// term.
func (h *heartbeats) currentView() *healthView {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.view
}

// follow ends the term: streams that follow its judgement end.
func (h *heartbeats) follow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.view != nil && h.view.leading {
		h.publish(false, h.view.nodes)
	}
}

// judge judges every node at now, and publishes the judgement if a node's
// health changed or a node was removed. It does nothing while this curator
// does not lead.
func (h *heartbeats) judge(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.view == nil || !h.view.leading {
		return
	}
	old, seq := h.view.nodes, h.view.seq+1
	var nodes map[string]judgement // a copy of old, once something changed
	for id := range h.seen {
		health := h.healthLocked(id, now)
		j, ok := old[id]
		if ok && j.health == health || !ok && health == api.NodeHealth_NODE_HEALTH_UNKNOWN {
			continue
		}
		if nodes == nil {
			nodes = maps.Clone(old)
		}
		nodes[id] = judgement{health: health, changed: seq}
	}
	for id := range old {
		if _, ok := h.seen[id]; !ok {
			// Deleted: its stream learns it from etcd.
			if nodes == nil {
				nodes = maps.Clone(old)
			}
			delete(nodes, id)
		}
	}
	if nodes != nil {
		h.publish(true, nodes)
	}
}

// judgeHealth judges every node's health once per healthTick, for the
// Watch streams, while this curator leads. It is a runnable of the
// election.
func (c *curator) judgeHealth(ctx context.Context) error {
	tick := time.NewTicker(healthTick(c.opts.heartbeatInterval))
	defer tick.Stop()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			c.heartbeats.judge(time.Now())
		}
	}
}
