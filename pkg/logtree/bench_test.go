package logtree

import (
	"sync"
	"testing"
)

// BenchmarkLeveledLog measures the cost of one Infof on the logger's
// goroutine: with nobody reading, with a streaming reader that keeps up (of
// the node's parent, so delivery walks up the tree), and with one that never
// reads, so that every entry is dropped for it.
func BenchmarkLeveledLog(b *testing.B) {
	for _, tc := range []struct {
		name   string
		reader func(lt *LogTree) (stop func())
	}{
		{"NoReader", func(*LogTree) func() { return func() {} }},
		{"StreamingReader", drainingReader},
		{"StuckReader", func(lt *LogTree) func() {
			r, err := lt.Read("root", WithChildren(), WithStream())
			if err != nil {
				b.Fatalf("Read: %v", err)
			}
			return r.Close
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lt := New()
			l := lt.LeveledFor("root.network.dhcp")
			stop := tc.reader(lt)
			defer stop()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.Infof("lease %d renewed", i)
				i++
			}
		})
	}
}

// drainingReader starts a streaming reader of root and below that receives
// as fast as it can, until the returned stop.
func drainingReader(lt *LogTree) (stop func()) {
	r, err := lt.Read("root", WithChildren(), WithStream())
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range r.Stream {
		}
	})
	return func() {
		r.Close()
		wg.Wait()
	}
}

// BenchmarkRawLog measures one line written through a raw logger.
func BenchmarkRawLog(b *testing.B) {
	lt := New()
	w := lt.RawFor("root.kubelet")
	defer w.Close()
	line := []byte("I1123 10:27:00.123456 kubelet.go:42] a typical line of process output\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		w.Write(line)
	}
}

// BenchmarkLeveledFor measures asking for a logger again, as the supervisor
// does on each Logger(ctx).
func BenchmarkLeveledFor(b *testing.B) {
	lt := New()
	lt.LeveledFor("root.network.dhcp")
	b.ReportAllocs()
	for b.Loop() {
		lt.LeveledFor("root.network.dhcp")
	}
}
