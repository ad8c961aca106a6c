package netns

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// Ack is one lease the DHCP server granted (a DHCPACK it sent), as the
// harness saw it: for e2e tests that time a node's first lease or check
// that a renewal kept the address.
type Ack struct {
	// Time is the host time the ACK was sent.
	Time time.Time
	// IP is the address leased.
	IP netip.Addr
	// Renewal is set when the client already held the address (it asked
	// from it, in the RENEWING or REBINDING state).
	Renewal bool
}

// ackLog keeps the ACKs sent to each node, in order.
type ackLog struct {
	mu      sync.Mutex
	byNode  map[int][]Ack
	changed chan struct{} // closed and replaced on every new ACK
}

func newAckLog() *ackLog {
	return &ackLog{byNode: map[int][]Ack{}, changed: make(chan struct{})}
}

func (l *ackLog) add(node int, a Ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byNode[node] = append(l.byNode[node], a)
	close(l.changed)
	l.changed = make(chan struct{})
}

// get returns node's ACKs and a channel closed at the next new one.
func (l *ackLog) get(node int) ([]Ack, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Ack(nil), l.byNode[node]...), l.changed
}

// Acks returns the ACKs the DHCP server sent to node i so far, oldest
// first.
func (n *Network) Acks(i int) []Ack {
	acks, _ := n.acks.get(i)
	return acks
}

// WaitAcks waits until the DHCP server has sent node i at least count ACKs
// and returns them all, oldest first.
func (n *Network) WaitAcks(ctx context.Context, i, count int) ([]Ack, error) {
	for {
		acks, changed := n.acks.get(i)
		if len(acks) >= count {
			return acks, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return acks, fmt.Errorf("waiting for %d DHCP ACKs to node %d, got %d: %w", count, i, len(acks), context.Cause(ctx))
		}
	}
}
