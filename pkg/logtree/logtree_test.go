package logtree

import "testing"

// TestRingGrowth checks that a node's ring grows with its entries and stops
// at the tree's backlog size exactly.
func TestRingGrowth(t *testing.T) {
	for _, size := range []int{1, 5, 16, 100, DefaultNodeBacklog} {
		lt := New(WithNodeBacklog(size))
		l := lt.LeveledFor("a")
		for i := range 3 * size {
			l.Info(i)
		}
		lt.mu.Lock()
		n := lt.lookupLocked([]string{"a"})
		length, capacity := len(n.ring), cap(n.ring)
		lt.mu.Unlock()
		if length != size || capacity != size {
			t.Errorf("WithNodeBacklog(%d): ring length %d, capacity %d, want both %d", size, length, capacity, size)
		}
	}
	if got := New(WithNodeBacklog(-3)).nodeBacklog; got != 1 {
		t.Errorf("WithNodeBacklog(-3) gives rings of %d, want 1", got)
	}
}
