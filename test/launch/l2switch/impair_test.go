package l2switch

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

// transfer is what sendThrough saw.
type transfer struct {
	sent []time.Time
	got  []arrival
	// stats are the receiving port's counters.
	stats PortStats
}

// sendThrough sends n frames, numbered from 0, gap apart, from one machine
// to another through a new switch with profile p, and returns what the
// other received. The machines are on SOCK_SEQPACKET ports, which never
// drop: every frame missing was dropped by the switch.
func sendThrough(t *testing.T, p Profile, n int, gap time.Duration) transfer {
	t.Helper()
	s := newSwitch(t, p)
	a, b := attachSeq(t, s, "a"), attachSeq(t, s, "b")
	var tr transfer

	// The receiver reads until it has what the switch let through: a
	// count known once the switch has read every frame.
	want := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, MaxFrame)
		deadline := time.Now().Add(time.Minute)
		count := -1
		for count < 0 || len(tr.got) < count {
			if count < 0 {
				select {
				case count = <-want:
					continue
				default:
				}
			}
			b.f.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			k, err := b.f.Read(buf)
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				if time.Now().After(deadline) {
					done <- errors.New("timed out waiting for frames")
					return
				}
			case err != nil:
				done <- err
				return
			default:
				tr.got = append(tr.got, arrival{seq: seqOf(buf[:k]), at: time.Now()})
			}
		}
		done <- nil
	}()

	for i := range n {
		tr.sent = append(tr.sent, time.Now())
		a.send(t, frame(broadcast, macA, uint32(i), 100))
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	waitFor(t, func() bool { return a.port.Stats().ReceivedFrames == uint64(n) })
	tr.stats = b.port.Stats()
	want <- n - int(tr.stats.Lost) - int(tr.stats.Overflow) + int(tr.stats.Duplicated)
	if err := <-done; err != nil {
		t.Fatalf("receiving: %v (got %d frames; port b: %v)", err, len(tr.got), tr.stats)
	}
	// Nothing more comes.
	if extra := b.recvAll(t, p.Delay+p.reorderHold()+100*time.Millisecond); len(extra) > 0 {
		t.Errorf("%d frames more than the switch let through: %v", len(extra), extra[:min(len(extra), 5)])
	}
	return tr
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// checkRate checks that count events in n trials agree with probability
// p, within four standard deviations.
func checkRate(t *testing.T, what string, count uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(count)-mean) > 4*sd {
		t.Errorf("%s %d of %d frames, want %.0f ± %.0f (%.2f%%)", what, count, n, mean, 4*sd, p*100)
	} else {
		t.Logf("%s %d of %d frames (%.2f%%, want %.2f%%)", what, count, n, 100*float64(count)/float64(n), p*100)
	}
}

// seqCounts counts how often each frame arrived.
func seqCounts(got []arrival) map[uint32]int {
	c := map[uint32]int{}
	for _, a := range got {
		c[a.seq]++
	}
	return c
}

func TestLoss(t *testing.T) {
	const n, loss = 20000, 0.05
	tr := sendThrough(t, Profile{Impairment: Impairment{Loss: loss}, Seed: 1}, n, 0)
	checkRate(t, "lost", tr.stats.Lost, n, loss)
	if len(tr.got) != n-int(tr.stats.Lost) {
		t.Errorf("received %d frames, want %d sent - %d lost", len(tr.got), n, tr.stats.Lost)
	}
	for i := 1; i < len(tr.got); i++ {
		if tr.got[i].seq <= tr.got[i-1].seq {
			t.Fatalf("frame %d arrived after frame %d: loss alone must neither reorder nor duplicate", tr.got[i].seq, tr.got[i-1].seq)
		}
	}
}

func TestDuplicate(t *testing.T) {
	const n, dup = 20000, 0.05
	tr := sendThrough(t, Profile{Impairment: Impairment{Duplicate: dup}, Seed: 2}, n, 0)
	checkRate(t, "duplicated", tr.stats.Duplicated, n, dup)
	twice := 0
	for seq, c := range seqCounts(tr.got) {
		switch c {
		case 1:
		case 2:
			twice++
		default:
			t.Errorf("frame %d arrived %d times", seq, c)
		}
	}
	if len(seqCounts(tr.got)) != n || twice != int(tr.stats.Duplicated) {
		t.Errorf("%d distinct frames arrived, %d twice; want %d, and %d twice", len(seqCounts(tr.got)), twice, n, tr.stats.Duplicated)
	}
}

func TestReorder(t *testing.T) {
	const n, reorder = 10000, 0.05
	tr := sendThrough(t, Profile{Impairment: Impairment{Reorder: reorder}, Seed: 3}, n, 0)
	checkRate(t, "reordered", tr.stats.Reordered, n, reorder)
	if c := seqCounts(tr.got); len(c) != n || len(tr.got) != n {
		t.Fatalf("%d frames arrived, %d distinct; want all %d once", len(tr.got), len(c), n)
	}
	// A frame is late when one sent after it arrived first.
	late, highest := 0, -1
	for _, a := range tr.got {
		if int(a.seq) < highest {
			late++
		}
		highest = max(highest, int(a.seq))
	}
	t.Logf("%d frames overtaken of %d held back", late, tr.stats.Reordered)
	// Frames sent back to back overtake every held frame, unless the
	// sender stalled for MinReorderHold.
	if late > int(tr.stats.Reordered) || float64(late) < 0.8*float64(tr.stats.Reordered) {
		t.Errorf("%d frames arrived late, want about the %d held back", late, tr.stats.Reordered)
	}
}

func TestJitterKeepsOrder(t *testing.T) {
	const n = 5000
	tr := sendThrough(t, Profile{Impairment: Impairment{Delay: 2 * time.Millisecond, Jitter: 2 * time.Millisecond}, Seed: 4}, n, 0)
	if len(tr.got) != n {
		t.Fatalf("%d frames arrived, want %d", len(tr.got), n)
	}
	for i, a := range tr.got {
		if a.seq != uint32(i) {
			t.Fatalf("frame %d arrived in place %d: jitter alone must keep the order", a.seq, i)
		}
	}
}

func TestDelay(t *testing.T) {
	// slack is how late a busy machine may run a goroutine.
	const slack = 100 * time.Millisecond
	for _, tc := range []struct {
		delay, jitter time.Duration
	}{
		{30 * time.Millisecond, 0},
		{20 * time.Millisecond, 10 * time.Millisecond},
	} {
		t.Run((tc.delay).String()+"±"+tc.jitter.String(), func(t *testing.T) {
			const n = 200
			tr := sendThrough(t, Profile{Impairment: Impairment{Delay: tc.delay, Jitter: tc.jitter}, Seed: 5}, n, time.Millisecond)
			if len(tr.got) != n {
				t.Fatalf("%d frames arrived, want %d", len(tr.got), n)
			}
			var lat []time.Duration
			for _, a := range tr.got {
				lat = append(lat, a.at.Sub(tr.sent[a.seq]))
			}
			slices.Sort(lat)
			lo, hi := tc.delay-tc.jitter, tc.delay+tc.jitter
			t.Logf("latency min %v, median %v, max %v (want %v to %v)", lat[0], lat[n/2], lat[n-1], lo, hi)
			if lat[0] < lo || lat[n-1] > hi+slack {
				t.Errorf("latencies from %v to %v, want %v to %v (+ %v for a busy machine)", lat[0], lat[n-1], lo, hi, slack)
			}
			// A busy machine only makes frames later, so these hold
			// however late goroutines run (TestDecide checks the
			// distribution itself).
			if tc.jitter > 0 && lat[0] >= tc.delay {
				t.Errorf("no frame arrived before %v: jitter %v does not spread the delays", tc.delay, tc.jitter)
			}
			if tc.jitter == 0 && lat[n/2] > tc.delay+10*time.Millisecond {
				t.Errorf("median latency %v, want about %v", lat[n/2], tc.delay)
			}
		})
	}
}

func TestOverflow(t *testing.T) {
	const n = MaxQueued + 4000
	tr := sendThrough(t, Profile{Impairment: Impairment{Delay: time.Second}, Seed: 6}, n, 0)
	if tr.stats.Overflow == 0 {
		t.Errorf("%d frames in flight at once: none overflowed the queue of %d", n, MaxQueued)
	}
	if len(tr.got) != n-int(tr.stats.Overflow) {
		t.Errorf("%d frames arrived, want %d sent - %d overflowed", len(tr.got), n, tr.stats.Overflow)
	}
}

// TestReplay sends the same frames through two switches with the same
// seed: the same frames are lost, duplicated and held back. Another seed
// decides otherwise.
func TestReplay(t *testing.T) {
	const n = 3000
	imp := Impairment{Delay: time.Millisecond, Jitter: time.Millisecond, Loss: 0.1, Duplicate: 0.1, Reorder: 0.1}
	fates := func(seed uint64) (map[uint32]int, PortStats) {
		tr := sendThrough(t, Profile{Impairment: imp, Seed: seed}, n, 0)
		return seqCounts(tr.got), tr.stats
	}
	first, st1 := fates(7)
	again, st2 := fates(7)
	other, st3 := fates(8)
	same := func(x, y PortStats) bool {
		return x.Lost == y.Lost && x.Duplicated == y.Duplicated && x.Reordered == y.Reordered
	}
	if !same(st1, st2) || !mapsEqual(first, again) {
		t.Errorf("seed 7 twice: lost, duplicated, held back %d, %d, %d then %d, %d, %d; same frames: %t",
			st1.Lost, st1.Duplicated, st1.Reordered, st2.Lost, st2.Duplicated, st2.Reordered, mapsEqual(first, again))
	}
	if same(st1, st3) && mapsEqual(first, other) {
		t.Errorf("seeds 7 and 8 decided the same fates")
	}
}

func mapsEqual(a, b map[uint32]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDecide checks the distributions decide draws from, without the
// network in the way.
func TestDecide(t *testing.T) {
	imp := &Impairment{Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.02, Duplicate: 0.005, Reorder: 0.005}
	rng := rand.New(rand.NewPCG(42, 1))
	const n = 200000
	var lost, dup, reordered uint64
	var delays []time.Duration
	for range n {
		v := decide(imp, rng)
		if v.lost {
			lost++
		}
		if v.copies == 2 {
			dup++
		}
		if v.reordered {
			reordered++
		}
		delays = append(delays, v.delay[0])
	}
	checkRate(t, "lost", lost, n, imp.Loss)
	checkRate(t, "duplicated", dup, n, imp.Duplicate)
	checkRate(t, "reordered", reordered, n, imp.Reorder)
	slices.Sort(delays)
	// Even over 30 to 70 ms: quartiles at 40, 50 and 60 ms.
	for _, q := range []struct {
		at   int
		want time.Duration
	}{{0, 30 * time.Millisecond}, {n / 4, 40 * time.Millisecond}, {n / 2, 50 * time.Millisecond}, {3 * n / 4, 60 * time.Millisecond}, {n - 1, 70 * time.Millisecond}} {
		if got := delays[q.at]; (got - q.want).Abs() > 500*time.Microsecond {
			t.Errorf("delay at rank %d of %d = %v, want %v", q.at, n, got, q.want)
		}
	}
	if delays[0] < 30*time.Millisecond || delays[n-1] > 70*time.Millisecond {
		t.Errorf("delays from %v to %v, want 30ms to 70ms", delays[0], delays[n-1])
	}

	// Every frame draws the same numbers whatever the outcome, so that
	// changing one impairment leaves the others' decisions alone.
	a, b := rand.New(rand.NewPCG(9, 9)), rand.New(rand.NewPCG(9, 9))
	lossOnly := &Impairment{Loss: 0.3}
	lossAndDup := &Impairment{Loss: 0.3, Duplicate: 0.5, Reorder: 0.5, Delay: time.Second}
	for i := range 1000 {
		if x, y := decide(lossOnly, a), decide(lossAndDup, b); x.lost != y.lost {
			t.Fatalf("frame %d: lost %t with loss alone, %t with duplication too", i, x.lost, y.lost)
		}
	}

	// No negative delay when the jitter is larger than the delay.
	wide := &Impairment{Delay: time.Millisecond, Jitter: 10 * time.Millisecond}
	for range 1000 {
		if v := decide(wide, rng); v.delay[0] < 0 || v.delay[1] < 0 {
			t.Fatalf("delays %v with %v ± %v", v.delay, wide.Delay, wide.Jitter)
		}
	}
}

func TestPartition(t *testing.T) {
	s := newSwitch(t, Profile{})
	a, b, c := attachUDP(t, s, "a"), attachUDP(t, s, "b"), attachUDP(t, s, "c")
	// Every port learns its machine's address.
	for i, m := range []*udpMachine{a, b, c} {
		m.send(t, frame(broadcast, [6]byte{0x52, 0x54, 0, 0, 0, 0x0a + byte(i)}, 0, 60))
	}
	for _, m := range []*udpMachine{a, b, c} {
		for range 2 {
			if m.recv(t, 5*time.Second) == nil {
				t.Fatalf("%s did not hear the others", m.port.Name())
			}
		}
	}
	reaches := func(from, to *udpMachine, dst [6]byte, src [6]byte, seq uint32) bool {
		t.Helper()
		f := frame(dst, src, seq, 60)
		from.send(t, f)
		got := to.recv(t, 300*time.Millisecond)
		return bytes.Equal(got, f)
	}

	s.Partition(c.port)
	if !reaches(a, b, macB, macA, 1) || !reaches(b, a, macA, macB, 2) {
		t.Error("a and b, on the same side, do not reach each other")
	}
	if reaches(a, c, macC, macA, 3) || reaches(c, b, macB, macC, 4) {
		t.Error("a frame crossed the partition")
	}
	// A broadcast from c floods nowhere.
	c.send(t, frame(broadcast, macC, 5, 60))
	if got := a.recv(t, 200*time.Millisecond); got != nil {
		t.Errorf("a received %x from the other side", got)
	}
	if got := c.port.Stats().Cut; got != 1 {
		t.Errorf("port c counts %d cut frames, want 1", got)
	}

	// A frame on its way when the partition comes is cut too.
	s.Heal()
	if err := s.SetLinkImpairment(a.port, c.port, Impairment{Delay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	before := a.port.Stats().ReceivedFrames
	a.send(t, frame(macC, macA, 6, 60))
	waitFor(t, func() bool { return a.port.Stats().ReceivedFrames > before })
	s.Partition(c.port)
	if got := c.recv(t, 500*time.Millisecond); got != nil {
		t.Errorf("a frame on its way when the partition came crossed it: %x", got)
	}

	s.Heal()
	if !reaches(c, a, macA, macC, 7) || !reaches(b, c, macC, macB, 8) {
		t.Error("c is still cut off after Heal")
	}
	// The delayed link into c works again too.
	f := frame(macC, macA, 9, 60)
	a.send(t, f)
	if got := c.recv(t, 5*time.Second); !bytes.Equal(got, f) {
		t.Errorf("after Heal, c received %x, want %x", got, f)
	}
}

func TestSetLinkImpairment(t *testing.T) {
	s := newSwitch(t, Profile{})
	a, b := attachUDP(t, s, "a"), attachUDP(t, s, "b")
	if err := s.SetLinkImpairment(a.port, b.port, Impairment{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLinkImpairment(a.port, b.port, Impairment{Loss: -1}); err == nil {
		t.Error("SetLinkImpairment with a negative loss succeeded")
	}
	a.send(t, frame(broadcast, macA, 1, 60))
	if got := b.recv(t, 300*time.Millisecond); got != nil {
		t.Errorf("b received %x over a link that loses everything", got)
	}
	f := frame(broadcast, macB, 2, 60)
	b.send(t, f)
	if got := a.recv(t, 5*time.Second); !bytes.Equal(got, f) {
		t.Errorf("a received %x, want %x: the other direction is not impaired", got, f)
	}
}
