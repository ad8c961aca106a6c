package logtree

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultNodeBacklog is how many entries each node of a tree keeps when New
// is not given WithNodeBacklog.
const DefaultNodeBacklog = 1024

// LogTree is a hierarchical log store. See the package documentation.
//
// A LogTree is safe for concurrent use. Its zero value is not usable; call
// New.
type LogTree struct {
	// nodeBacklog is the ring size of every node, fixed at New.
	nodeBacklog int

	// mu guards the tree's shape, every node's ring and readers, seq and
	// leveled. One lock for all of it is what lets Read take a backlog and
	// subscribe to the stream atomically, so that a reader sees every entry
	// exactly once. A logger holds it for a ring slot write and one
	// non-blocking channel send per interested reader; Read for copying the
	// pointers of the entries it returns, which it sorts after letting go.
	mu   sync.Mutex
	root *node
	// seq numbers entries in the order the tree accepted them. Backlogs of
	// several nodes are merged in seq order.
	seq uint64
	// leveled holds the loggers LeveledFor handed out, by the DN asked for.
	leveled map[DN]*leveledLogger
}

// TreeOption configures New.
type TreeOption func(*LogTree)

// WithNodeBacklog sets how many of its newest entries each node keeps, at
// least 1. The default is DefaultNodeBacklog.
func WithNodeBacklog(n int) TreeOption {
	return func(t *LogTree) {
		t.nodeBacklog = max(n, 1)
	}
}

// New returns an empty log tree.
func New(opts ...TreeOption) *LogTree {
	t := &LogTree{
		nodeBacklog: DefaultNodeBacklog,
		root:        &node{},
		leveled:     make(map[DN]*leveledLogger),
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// entry is a LogEntry as the tree stores it: with its place in the order of
// acceptance. Readers get a pointer to the embedded LogEntry.
type entry struct {
	LogEntry
	seq uint64
}

// node is one DN of the tree. All fields but dn and parent, which never
// change, are guarded by LogTree.mu.
type node struct {
	dn       DN
	parent   *node
	children map[string]*node

	// ring holds the node's newest entries. It grows as needed up to the
	// tree's nodeBacklog, so that quiet nodes stay small, and then wraps:
	// next is the slot the following entry overwrites, which is also the
	// oldest entry. While the ring is growing next stays 0.
	ring []*entry
	next int

	// readers stream from this node, with or without its children.
	readers []*subscriber
}

// nodeFor returns the node for the given DN parts, creating it and any
// missing ancestors.
func (t *LogTree) nodeFor(parts []string) *node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nodeForLocked(parts)
}

func (t *LogTree) nodeForLocked(parts []string) *node {
	n := t.root
	for i, p := range parts {
		c, ok := n.children[p]
		if !ok {
			if n.children == nil {
				n.children = make(map[string]*node)
			}
			c = &node{dn: DN(strings.Join(parts[:i+1], ".")), parent: n}
			n.children[p] = c
		}
		n = c
	}
	return n
}

// lookupLocked returns the node for the given DN parts, or nil if nothing
// has created it yet.
func (t *LogTree) lookupLocked(parts []string) *node {
	n := t.root
	for _, p := range parts {
		n = n.children[p]
		if n == nil {
			return nil
		}
	}
	return n
}

// append stamps e with the current time and its sequence number, stores it
// in n's ring and offers it to every reader of n and of n's ancestors that
// reads with children. It never blocks on readers.
func (t *LogTree) append(n *node, e *entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	e.seq = t.seq
	e.Time = time.Now()
	e.DN = n.dn
	n.push(e, t.nodeBacklog)
	for _, s := range n.readers {
		s.offer(e)
	}
	for a := n.parent; a != nil; a = a.parent {
		for _, s := range a.readers {
			if s.children {
				s.offer(e)
			}
		}
	}
}

// push stores e as the newest entry of n's ring of the given size.
func (n *node) push(e *entry, size int) {
	if len(n.ring) < size {
		if len(n.ring) == cap(n.ring) {
			// Grow by doubling as append would, but never past size.
			grown := make([]*entry, len(n.ring), min(max(2*cap(n.ring), 16), size))
			copy(grown, n.ring)
			n.ring = grown
		}
		n.ring = append(n.ring, e)
		return
	}
	n.ring[n.next] = e
	n.next = (n.next + 1) % len(n.ring)
}

// collect appends to dst up to limit of n's newest entries of at least
// severity minSev, oldest first, and returns the extended slice. A negative
// limit means no limit.
func (n *node) collect(dst []*entry, limit int, minSev Severity) []*entry {
	start := len(dst)
	for i := range n.ring {
		if limit >= 0 && len(dst)-start >= limit {
			break
		}
		// i-th newest entry.
		e := n.ring[(n.next-1-i+len(n.ring))%len(n.ring)]
		if e.Severity >= minSev {
			dst = append(dst, e)
		}
	}
	slices.Reverse(dst[start:])
	return dst
}

// collectTree is collect over n and all its descendants. The result is
// ordered per node, not overall.
func (n *node) collectTree(dst []*entry, limit int, minSev Severity) []*entry {
	dst = n.collect(dst, limit, minSev)
	for _, c := range n.children {
		dst = c.collectTree(dst, limit, minSev)
	}
	return dst
}
