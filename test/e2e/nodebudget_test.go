//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

var nodesAtOnceFlag = flag.Int("nodes-at-once", 4, "the most nodes the parallel suites run at once: a suite waits until its nodes fit, the suites with the most nodes first")

// A nodeBudget shares the machine among the parallel suites by the nodes
// they run, not by their number: two three-node suites side by side are
// seven emulated CPUs on a two-core machine, and their etcd misses its
// deadlines however long the test waits. Go's -parallel counts suites
// alike, so make e2e sets it high and this decides.
//
// A suite starts when its nodes fit in what is left, unless a suite of
// more nodes is waiting and would fit now: the big suites go first and the
// small ones fill in beside them, the order that finishes soonest. A suite
// larger than the budget starts when nothing else runs. Nothing starts in
// the first moments after the first suite asks (gather): Go releases the
// parallel suites one after another, and a small suite that came first
// must not take the room a big one that came a moment later needs.
type nodeBudget struct {
	mu      sync.Mutex
	changed *sync.Cond
	limit   int
	gather  time.Duration
	opens   time.Time // zero until the first suite asks
	used    int
	waiting map[int]int // nodes → suites of that many waiting
}

// budgetGathers is how long the budget waits for the suites to ask.
const budgetGathers = 2 * time.Second

// budget is the parallel suites' node budget; its limit is
// -nodes-at-once, read when the first suite asks (after flags are parsed).
var budget = newNodeBudget(0, budgetGathers)

func newNodeBudget(limit int, gather time.Duration) *nodeBudget {
	b := &nodeBudget{limit: limit, gather: gather, waiting: map[int]int{}}
	b.changed = sync.NewCond(&b.mu)
	return b
}

// take waits until n nodes may run and returns the call that gives them
// back.
func (b *nodeBudget) take(n int) (giveBack func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opens.IsZero() {
		if b.limit == 0 {
			b.limit = max(*nodesAtOnceFlag, 1)
		}
		b.opens = time.Now().Add(b.gather)
		time.AfterFunc(b.gather, func() {
			b.mu.Lock()
			b.changed.Broadcast()
			b.mu.Unlock()
		})
	}
	b.waiting[n]++
	for !b.mayStart(n) {
		b.changed.Wait()
	}
	b.waiting[n]--
	b.used += n
	// What is left may fit a smaller suite that waited behind this one.
	b.changed.Broadcast()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.used -= n
			b.changed.Broadcast()
			b.mu.Unlock()
		})
	}
}

// mayStart tells whether a suite of n nodes may start now; b.mu is held.
func (b *nodeBudget) mayStart(n int) bool {
	if time.Now().Before(b.opens) || !b.fits(n) {
		return false
	}
	for m, count := range b.waiting {
		if m > n && count > 0 && b.fits(m) {
			return false
		}
	}
	return true
}

// fits tells whether n more nodes fit now; b.mu is held.
func (b *nodeBudget) fits(n int) bool {
	return b.used == 0 || b.used+n <= b.limit
}

// TestNodeBudget asks the budget for a mix of suites at once, as the
// parallel suites do, and checks the order it lets them run in: never more
// nodes than the limit, never two three-node suites together, a
// three-node suite first and small ones beside it.
func TestNodeBudget(t *testing.T) {
	b := newNodeBudget(4, 100*time.Millisecond)
	var (
		mu      sync.Mutex
		running int
		big     int
		order   []int
		errs    []string
		wg      sync.WaitGroup
	)
	for _, n := range []int{1, 1, 3, 2, 3, 1, 1, 3} {
		wg.Go(func() {
			giveBack := b.take(n)
			mu.Lock()
			running += n
			if n == 3 {
				big++
			}
			order = append(order, n)
			if running > 4 || big > 1 {
				errs = append(errs, fmt.Sprintf("%d nodes running, %d three-node suites, after a %d-node suite started", running, big, n))
			}
			mu.Unlock()
			time.Sleep(time.Duration(10*n) * time.Millisecond)
			mu.Lock()
			running -= n
			if n == 3 {
				big--
			}
			mu.Unlock()
			giveBack()
		})
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	if order[0] != 3 {
		t.Errorf("suites started in the order %v, not a three-node suite first", order)
	}
	lastBig := 0
	for i, n := range order {
		if n == 3 {
			lastBig = i
		}
	}
	if i := slices.Index(order, 1); i < 0 || i > lastBig {
		t.Errorf("suites started in the order %v: no one-node suite ran beside a three-node one", order)
	}
}
