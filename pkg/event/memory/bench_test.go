package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchmarkWatchers runs one writer doing b.N Sets while the given number of
// goroutines each loop on Get of a watcher of their own. It reports the
// writer's cost per Set, how many updates reached watchers per second, and
// how many watchers saw an average Set (the rest were skipped as stale).
func benchmarkWatchers(b *testing.B, watchers int) {
	ctx := context.Background()
	var v Value[int]
	v.Set(0)
	var delivered atomic.Int64
	var wg sync.WaitGroup
	for range watchers {
		w := v.Watch()
		if _, err := w.Get(ctx); err != nil {
			b.Fatalf("Get: %v", err)
		}
		wg.Go(func() {
			defer w.Close()
			for {
				got, err := w.Get(ctx)
				if err != nil {
					b.Errorf("Get: %v", err)
					return
				}
				if got < 0 {
					return
				}
				delivered.Add(1)
			}
		})
	}

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		v.Set(i + 1)
	}
	setting := time.Since(start)
	// -1 tells the watchers to stop; waiting for them counts as delivery
	// time.
	v.Set(-1)
	wg.Wait()
	total := time.Since(start)
	b.StopTimer()

	b.ReportMetric(float64(setting.Nanoseconds())/float64(b.N), "ns/set")
	b.ReportMetric(float64(delivered.Load())/total.Seconds(), "updates/s")
	b.ReportMetric(float64(delivered.Load())/float64(b.N), "deliveries/set")
}

// BenchmarkEventFanout is one writer and a thousand watchers, each in a
// goroutine of its own, as many runnables following one Value would be.
func BenchmarkEventFanout(b *testing.B) {
	benchmarkWatchers(b, 1000)
}

// BenchmarkEventSingleWatcher is one update handed from a writer to one
// watcher goroutine and acknowledged: the writer Sets ping, the watcher Gets
// it and Sets pong, the writer Gets pong. Every update is seen, so this is
// the latency of a delivery that wakes a parked goroutine, twice.
func BenchmarkEventSingleWatcher(b *testing.B) {
	ctx := context.Background()
	var ping, pong Value[int]
	pingW, pongW := ping.Watch(), pong.Watch()
	defer pongW.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer pingW.Close()
		for {
			got, err := pingW.Get(ctx)
			if err != nil {
				b.Errorf("Get: %v", err)
				return
			}
			if got < 0 {
				return
			}
			pong.Set(got)
		}
	})

	b.ResetTimer()
	start := time.Now()
	for i := 1; i <= b.N; i++ {
		ping.Set(i)
		if got, err := pongW.Get(ctx); err != nil || got != i {
			b.Fatalf("Get = %d, %v, want %d", got, err, i)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	ping.Set(-1)
	wg.Wait()

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "roundtrips/s")
}

// BenchmarkEventSetGet is the uncontended path: Set, then Get of that value
// on the same goroutine, never blocking.
func BenchmarkEventSetGet(b *testing.B) {
	ctx := context.Background()
	var v Value[int]
	w := v.Watch()
	defer w.Close()
	for i := range b.N {
		v.Set(i)
		if _, err := w.Get(ctx); err != nil {
			b.Fatalf("Get: %v", err)
		}
	}
}

// BenchmarkEventSetUnwatched is a Set that nobody waits for.
func BenchmarkEventSetUnwatched(b *testing.B) {
	var v Value[int]
	for i := range b.N {
		v.Set(i)
	}
}
