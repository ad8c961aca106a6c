package l2switch

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// link is one direction between two ports: the frames that the machine
// behind from sends to the machine behind to. The ingress goroutine of
// from is the only one to use rng and last; imp may be swapped by
// SetLinkImpairment at any time.
type link struct {
	from, to *Port
	imp      atomic.Pointer[Impairment]
	rng      *rand.Rand
	// last is when the last frame that keeps the link's order leaves it:
	// no such frame may leave before.
	last time.Time
}

func newLink(from, to *Port, seed uint64, imp Impairment) *link {
	l := &link{
		from: from,
		to:   to,
		rng:  rand.New(rand.NewPCG(seed, linkStream(from.name, to.name))),
	}
	l.imp.Store(&imp)
	return l
}

// linkStream is the second half of a link's PCG seed: from the names of
// its ports, so that a link draws the same numbers in every run, whatever
// order the ports were attached in.
func linkStream(from, to string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(from))
	h.Write([]byte{0})
	h.Write([]byte(to))
	return h.Sum64()
}

// verdict is the fate of one frame on a link.
type verdict struct {
	lost bool
	// copies is 1, or 2 for a duplicated frame; delay holds the delay of
	// each.
	copies int
	delay  [2]time.Duration
	// reordered says that the first copy is held back outside the link's
	// order.
	reordered bool
}

// drawsPerFrame is how many random numbers decide draws for every frame.
const drawsPerFrame = 5

// decide draws the fate of one frame. It draws drawsPerFrame numbers
// whatever the outcome, so that with the same seed and impairment the
// k-th frame of a link always meets the same fate: a run replays.
func decide(imp *Impairment, rng *rand.Rand) verdict {
	var u [drawsPerFrame]float64
	for i := range u {
		u[i] = rng.Float64()
	}
	v := verdict{
		lost:      u[0] < imp.Loss,
		copies:    1,
		reordered: u[2] < imp.Reorder,
	}
	if u[1] < imp.Duplicate {
		v.copies = 2
	}
	for k := range v.delay {
		d := imp.Delay + time.Duration((2*u[3+k]-1)*float64(imp.Jitter))
		v.delay[k] = max(d, 0)
	}
	return v
}

// reorderHold is how much longer than its delay a reordered frame waits.
func (i Impairment) reorderHold() time.Duration {
	return max(i.Delay+i.Jitter, MinReorderHold)
}

// inFrame is a frame as the ingress goroutine read it: in its read buffer
// until a link needs to keep it, then in a copy that every link and
// every copy shares. Nobody ever writes to a frame.
type inFrame struct {
	data []byte
	kept bool
}

func (f *inFrame) keep() []byte {
	if !f.kept {
		f.data, f.kept = bytes.Clone(f.data), true
	}
	return f.data
}

// pass sends f across the link, as the link's impairment says: at once
// from this goroutine when nothing waits, else through the scheduler of
// the port at the other end.
func (l *link) pass(f *inFrame, now time.Time) {
	imp := l.imp.Load()
	if *imp == (Impairment{}) {
		l.to.deliver(l.from, f.data)
		return
	}
	v := decide(imp, l.rng)
	st := &l.to.stats
	if v.lost {
		st.lost.Add(1)
		return
	}
	if v.copies > 1 {
		st.duplicated.Add(1)
	}
	if !imp.timed() {
		for range v.copies {
			l.to.deliver(l.from, f.data)
		}
		return
	}
	data := f.keep()
	for k := range v.copies {
		at := now.Add(v.delay[k])
		if k == 0 && v.reordered {
			// Outside the order: last stays, so that what follows may
			// leave first.
			st.reordered.Add(1)
			l.to.egress.push(at.Add(imp.reorderHold()), l.from, data)
			continue
		}
		if at.Before(l.last) {
			at = l.last
		}
		l.last = at
		l.to.egress.push(at, l.from, data)
	}
}
