package curator

import (
	"crypto/ed25519"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// TestHonours checks the leader's memory of UP records for heartbeats: it
// answers only for the key on record, only within honourTTL, never for a
// record that was not UP, and never from a read that a change of the
// record (forget) or a new term (reset) overtook.
func TestHonours(t *testing.T) {
	key := identitytest.NewKey(t).Public().(ed25519.PublicKey)
	other := identitytest.NewKey(t).Public().(ed25519.PublicKey)
	p := identity.Peer{Kind: identity.PeerNode, NodeID: identity.NodeID(key), PublicKey: key}
	up := &private.Node{PublicKey: key, FsmState: api.NodeState_NODE_STATE_UP, Roles: &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}}}
	now := time.Unix(1_000_000, 0)

	var h honours
	if _, ok := h.known(p, now); ok {
		t.Fatal("an empty memory honours a node")
	}
	h.remember(h.token(p.NodeID), up, now)
	if member, ok := h.known(p, now.Add(honourTTL-time.Second)); !ok || !member {
		t.Errorf("a record read UP: known = %v, member %v; want honoured, a member", ok, member)
	}
	if _, ok := h.known(p, now.Add(honourTTL)); ok {
		t.Error("a record read UP is still honoured from memory after honourTTL")
	}
	impostor := p
	impostor.PublicKey = other
	if _, ok := h.known(impostor, now); ok {
		t.Error("a certificate of another key is honoured from memory")
	}

	h.forget(p.NodeID)
	if _, ok := h.known(p, now); ok {
		t.Error("a forgotten node is still honoured from memory")
	}

	decommissioned := &private.Node{PublicKey: key, FsmState: api.NodeState_NODE_STATE_DECOMMISSIONED}
	h.remember(h.token(p.NodeID), decommissioned, now)
	if _, ok := h.known(p, now); ok {
		t.Error("a record read DECOMMISSIONED is honoured from memory")
	}

	for name, overtake := range map[string]func(){
		"a change of the record": func() { h.forget(p.NodeID) },
		"a new term":             h.reset,
	} {
		tok := h.token(p.NodeID)
		overtake()
		h.remember(tok, up, now)
		if _, ok := h.known(p, now); ok {
			t.Errorf("a read overtaken by %s is remembered", name)
		}
	}

	h.remember(h.token(p.NodeID), up, now)
	h.reset()
	if _, ok := h.known(p, now); ok {
		t.Error("a node read in the term before is honoured from memory")
	}
}
