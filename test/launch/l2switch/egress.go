package l2switch

import (
	"container/heap"
	"sync"
	"time"
)

// MaxQueued is how many frames may wait for one port at once; frames
// beyond it are dropped and counted (PortStats.Overflow), as a real
// switch's full queue drops them.
const MaxQueued = 16384

// egress holds the frames that wait to leave through one port, in the
// order they are due. Ingress goroutines push; the port's egress
// goroutine (run) writes each frame once it is due.
type egress struct {
	port *Port

	mu     sync.Mutex
	frames frameHeap
	seq    uint64
	// wake holds a token when a frame was pushed that is due before the
	// one run sleeps for.
	wake chan struct{}
}

func newEgress(p *Port) *egress {
	return &egress{port: p, wake: make(chan struct{}, 1)}
}

// push queues data from port from, to leave at time at.
func (e *egress) push(at time.Time, from *Port, data []byte) {
	e.mu.Lock()
	if len(e.frames) >= MaxQueued {
		e.mu.Unlock()
		e.port.stats.overflow.Add(1)
		return
	}
	e.seq++
	heap.Push(&e.frames, queued{at: at, seq: e.seq, from: from, data: data})
	first := e.frames[0].seq == e.seq
	e.mu.Unlock()
	if first {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// due takes every frame due at now off the queue, in order, and returns
// them with the time the next one is due (zero if none waits).
func (e *egress) due(now time.Time, out []queued) ([]queued, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.frames) > 0 && !e.frames[0].at.After(now) {
		out = append(out, heap.Pop(&e.frames).(queued))
	}
	if len(e.frames) == 0 {
		return out, time.Time{}
	}
	return out, e.frames[0].at
}

// run writes frames as they come due, until done is closed. Frames still
// queued then are dropped.
func (e *egress) run(done <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []queued
	for {
		var next time.Time
		batch, next = e.due(time.Now(), batch[:0])
		for i, q := range batch {
			e.port.deliver(q.from, q.data)
			batch[i] = queued{}
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-done:
			return
		case <-e.wake:
		case <-timer.C:
		}
	}
}

// queued is a frame waiting in an egress queue.
type queued struct {
	at   time.Time
	seq  uint64
	from *Port
	data []byte
}

// frameHeap orders frames by the time they are due, then by the order
// they were pushed in, so that frames due at the same moment keep it.
type frameHeap []queued

func (h frameHeap) Len() int { return len(h) }
func (h frameHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *frameHeap) Push(x any)   { *h = append(*h, x.(queued)) }
func (h *frameHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = queued{}
	*h = old[:len(old)-1]
	return q
}
