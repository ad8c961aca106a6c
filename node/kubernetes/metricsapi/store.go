package metricsapi

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// A usage is what a node or a container used over a window that ended at
// a time: CPU in cores (the mean over the window), memory in bytes (the
// working set at its end).
type usage struct {
	at     time.Time
	window time.Duration
	cpu    float64
	memory uint64
}

// usageBetween is the usage from reading a to reading b, of the same node
// or container, and whether there is one: b later than a, and its CPU
// time not smaller (a container that restarted starts again from zero).
func usageBetween(a, b reading) (usage, bool) {
	if !a.complete() || !b.complete() {
		return usage{}, false
	}
	window := b.cpuAt.Sub(a.cpuAt)
	if window <= 0 || b.cpu < a.cpu {
		return usage{}, false
	}
	return usage{at: b.cpuAt, window: window, cpu: (b.cpu - a.cpu) / window.Seconds(), memory: b.memory}, true
}

// A nodeHistory is a node's last scrape, the readings its windows start
// from (add), and when the last one was taken (by the scraper's clock).
type nodeHistory struct {
	prev, last scrape
	taken      time.Time
}

// A store keeps the last two scrapes of every node, from which it gives
// the usage of the nodes and of their pods. A node whose last scrape is
// older than maxAge has no usage: its kubelet stopped answering.
type store struct {
	maxAge time.Duration
	now    func() time.Time

	mu    sync.Mutex
	nodes map[string]*nodeHistory
}

func newStore(maxAge time.Duration) *store {
	return &store{maxAge: maxAge, now: time.Now, nodes: map[string]*nodeHistory{}}
}

// add records a scrape of node. Each reading's window starts at the
// reading before it that was stamped earlier: the kubelet stamps the
// node's CPU time when its cAdvisor last read it, every 10 to 20 s, so
// two scrapes 15 s apart may carry the same stamp, and a window of
// nothing would leave the node out of kubectl top until the next scrape.
func (s *store) add(node string, sc scrape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.nodes[node]
	if h == nil {
		h = &nodeHistory{}
		s.nodes[node] = h
	}
	prev := scrape{
		node:       windowStart(h.prev.node, h.last.node, sc.node),
		containers: make(map[containerKey]reading, len(sc.containers)),
	}
	for k, r := range sc.containers {
		if st := windowStart(h.prev.containers[k], h.last.containers[k], r); st.complete() {
			prev.containers[k] = st
		}
	}
	h.prev, h.last, h.taken = prev, sc, s.now()
}

// windowStart is the reading a window ending at next starts from: last,
// if it was stamped before next, else prev, the one before last.
func windowStart(prev, last, next reading) reading {
	if last.cpuAt.Before(next.cpuAt) {
		return last
	}
	return prev
}

// retain forgets every node but those named.
func (s *store) retain(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.nodes {
		if !slices.Contains(names, n) {
			delete(s.nodes, n)
		}
	}
}

// fresh returns the history of node if its last scrape is recent enough;
// s.mu is held.
func (s *store) fresh(node string) (*nodeHistory, bool) {
	h := s.nodes[node]
	if h == nil || s.now().Sub(h.taken) > s.maxAge {
		return nil, false
	}
	return h, true
}

// nodeUsage returns the usage of every node that has one, by name.
func (s *store) nodeUsage() map[string]usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]usage{}
	for name := range s.nodes {
		if h, ok := s.fresh(name); ok {
			if u, ok := usageBetween(h.prev.node, h.last.node); ok {
				out[name] = u
			}
		}
	}
	return out
}

// A podKey names a pod.
type podKey struct {
	namespace, name string
}

// A containerUsage is the usage of one container of a pod.
type containerUsage struct {
	name string
	usage
}

// podUsage returns the usage of the containers of every pod that has one,
// by pod, the containers in the order of their names.
func (s *store) podUsage() map[podKey][]containerUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[podKey][]containerUsage{}
	for name := range s.nodes {
		h, ok := s.fresh(name)
		if !ok {
			continue
		}
		for k, last := range h.last.containers {
			if u, ok := usageBetween(h.prev.containers[k], last); ok {
				p := podKey{k.namespace, k.pod}
				out[p] = append(out[p], containerUsage{name: k.container, usage: u})
			}
		}
	}
	for _, cs := range out {
		slices.SortFunc(cs, func(a, b containerUsage) int { return cmp.Compare(a.name, b.name) })
	}
	return out
}
