package curator

import (
	"bytes"
	"crypto/ed25519"
	"sync"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// honourTTL is how long the leader takes a node's record, read UP, as
// still honouring the node's certificate for its heartbeats without
// reading it again. Every change this curator makes to a record ends its
// entry at once (forget); the TTL bounds only what it cannot see coming:
// a change made by a curator that lost the lead without noticing it yet.
const honourTTL = time.Minute

// honours is the leader's memory of the nodes it last read UP, for the
// judgement of heartbeats. A heartbeat grants nothing but a time in the
// leader's memory, and it is most of a cluster's calls: reading the
// caller's record for each, linearizably, waited for etcd's leader to
// confirm it leads and for the member to apply the writes queued before
// it, and on the member's commits (make bench-scale, heartbeats while
// nodes enrol). Other calls always read the record, linearizably.
//
// A heartbeat of a node not in memory reads the record serializably, on
// the leader's own member: the leader makes every revocation through that
// member, which applies a write before it answers, and a curator leads
// only once its member applied the end of the candidacies before its own.
// A revocation (updateNode, deleteNode) forgets the node once its write
// ended, whatever the outcome, so once it has returned no heartbeat is
// honoured from memory: a read that started before the forget is not
// remembered (token), and one that started after it sees the write.
type honours struct {
	mu sync.Mutex
	// nodes are the records read UP, by node ID.
	nodes map[string]honoured
	// changes counts the forgets of each node, and term the resets: a
	// read is remembered only if neither moved since it started.
	changes map[string]uint64
	term    uint64
}

// honoured is what a record read UP says of its node.
type honoured struct {
	key ed25519.PublicKey
	// member is whether it holds the ConsensusMember role, which lets it
	// forward calls (trustForwarder).
	member bool
	at     time.Time
}

// honourToken is the state of honours when a read of a record started.
type honourToken struct {
	id           string
	change, term uint64
}

// known says whether p's certificate is honoured by a record read UP
// within honourTTL before now, and whether that node is a consensus
// member.
func (h *honours) known(p identity.Peer, now time.Time) (member, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, found := h.nodes[p.NodeID]
	if !found || now.Sub(e.at) >= honourTTL || !bytes.Equal(e.key, p.PublicKey) {
		return false, false
	}
	return e.member, true
}

// token is taken before reading the record of node id.
func (h *honours) token(id string) honourToken {
	h.mu.Lock()
	defer h.mu.Unlock()
	return honourToken{id: id, change: h.changes[id], term: h.term}
}

// remember keeps n, the record of t's node read at now, when it is UP and
// nothing forgot the node since t was taken.
func (h *honours) remember(t honourToken, n *private.Node, now time.Time) {
	if n.GetFsmState() != api.NodeState_NODE_STATE_UP {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changes[t.id] != t.change || h.term != t.term {
		return
	}
	if h.nodes == nil {
		h.nodes = map[string]honoured{}
	}
	h.nodes[t.id] = honoured{key: n.PublicKey, member: n.GetRoles().GetConsensusMember() != nil, at: now}
}

// forget drops node id: its record is about to change, or changed.
func (h *honours) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nodes, id)
	if h.changes == nil {
		h.changes = map[string]uint64{}
	}
	h.changes[id]++
}

// reset drops every node, at the start of a term of leadership: the
// curator did not see the changes made while it did not lead.
func (h *honours) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.nodes)
	h.term++
}
