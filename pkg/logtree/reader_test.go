package logtree

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// texts returns "dn: message" for each entry.
func texts(es []*LogEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.DN) + ": " + e.Message
	}
	return out
}

// mustRead is Read that fails t on error and closes the reader at the end
// of the test.
func mustRead(t *testing.T, lt *LogTree, dn DN, opts ...ReadOption) *LogReader {
	t.Helper()
	r, err := lt.Read(dn, opts...)
	if err != nil {
		t.Fatalf("Read(%q): %v", dn, err)
	}
	t.Cleanup(r.Close)
	return r
}

// receive returns the next n entries of r's stream, failing t if the stream
// ends first or stays silent for long.
func receive(t *testing.T, r *LogReader, n int) []*LogEntry {
	t.Helper()
	var out []*LogEntry
	for len(out) < n {
		select {
		case e, ok := <-r.Stream:
			if !ok {
				t.Fatalf("stream closed after %d entries, want %d", len(out), n)
			}
			out = append(out, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("no entry in 10s after %d entries, want %d", len(out), n)
		}
	}
	return out
}

// assertEmpty fails t if r's stream holds an entry right now.
func assertEmpty(t *testing.T, r *LogReader) {
	t.Helper()
	select {
	case e := <-r.Stream:
		t.Errorf("unexpected entry %q", e)
	default:
	}
}

// logTree fills a tree with one entry per node, interleaved, in this order.
func logTree(lt *LogTree) {
	for _, dn := range []DN{"root", "root.net", "root.net.dhcp", "root.storage", "root.net", "other", "", "root"} {
		lt.LeveledFor(dn).Info("in " + string(dn))
	}
}

func TestReadHierarchy(t *testing.T) {
	lt := New()
	logTree(lt)
	for _, tc := range []struct {
		dn       DN
		children bool
		want     []string
	}{
		{dn: "root", want: []string{"root: in root", "root: in root"}},
		{dn: "root.net", want: []string{"root.net: in root.net", "root.net: in root.net"}},
		{dn: "root", children: true, want: []string{
			"root: in root",
			"root.net: in root.net",
			"root.net.dhcp: in root.net.dhcp",
			"root.storage: in root.storage",
			"root.net: in root.net",
			"root: in root",
		}},
		{dn: "root.net", children: true, want: []string{
			"root.net: in root.net",
			"root.net.dhcp: in root.net.dhcp",
			"root.net: in root.net",
		}},
		{dn: "", want: []string{": in "}},
		{dn: "", children: true, want: []string{
			"root: in root",
			"root.net: in root.net",
			"root.net.dhcp: in root.net.dhcp",
			"root.storage: in root.storage",
			"root.net: in root.net",
			"other: in other",
			": in ",
			"root: in root",
		}},
		{dn: "root.ne", children: true},
		{dn: "nobody", children: true},
	} {
		opts := []ReadOption{WithBacklog(BacklogAll)}
		if tc.children {
			opts = append(opts, WithChildren())
		}
		r := mustRead(t, lt, tc.dn, opts...)
		if diff := cmp.Diff(tc.want, texts(r.Backlog), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Read(%q, children %v) mismatch (-want +got):\n%s", tc.dn, tc.children, diff)
		}
	}
}

func TestReadDoesNotCreateNodes(t *testing.T) {
	lt := New()
	mustRead(t, lt, "a.b", WithBacklog(BacklogAll), WithChildren())
	lt.mu.Lock()
	n := lt.lookupLocked([]string{"a"})
	lt.mu.Unlock()
	if n != nil {
		t.Errorf("backlog-only Read created node %q", n.dn)
	}
}

func TestBacklogRingWraps(t *testing.T) {
	lt := New(WithNodeBacklog(4))
	l := lt.LeveledFor("a")
	for i := range 10 {
		l.Info(i)
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{BacklogAll, []string{"6", "7", "8", "9"}},
		{100, []string{"6", "7", "8", "9"}},
		{4, []string{"6", "7", "8", "9"}},
		{2, []string{"8", "9"}},
		{1, []string{"9"}},
		{0, []string{}},
	} {
		r := mustRead(t, lt, "a", WithBacklog(tc.n))
		var got []string
		for _, e := range r.Backlog {
			got = append(got, e.Message)
		}
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("WithBacklog(%d) mismatch (-want +got):\n%s", tc.n, diff)
		}
	}
}

// TestBacklogMergeNewest checks that a limited backlog over several nodes is
// the newest entries overall, not per node, and that each node keeps its own
// ring: a chatty node does not push out a quiet one.
func TestBacklogMergeNewest(t *testing.T) {
	lt := New(WithNodeBacklog(3))
	quiet, chatty := lt.LeveledFor("a.quiet"), lt.LeveledFor("a.chatty")
	quiet.Info("q0")
	for i := range 5 {
		chatty.Info("c", i)
	}
	quiet.Info("q1")
	chatty.Info("c5")

	all := mustRead(t, lt, "a", WithChildren(), WithBacklog(BacklogAll))
	want := []string{"a.quiet: q0", "a.chatty: c3", "a.chatty: c4", "a.quiet: q1", "a.chatty: c5"}
	if diff := cmp.Diff(want, texts(all.Backlog)); diff != "" {
		t.Errorf("BacklogAll mismatch (-want +got):\n%s", diff)
	}
	newest := mustRead(t, lt, "a", WithChildren(), WithBacklog(2))
	if diff := cmp.Diff(want[3:], texts(newest.Backlog)); diff != "" {
		t.Errorf("WithBacklog(2) mismatch (-want +got):\n%s", diff)
	}
}

func TestMinimumSeverity(t *testing.T) {
	lt := New()
	stream := mustRead(t, lt, "a", WithChildren(), WithStream(), WithMinimumSeverity(WARNING))
	l, raw := lt.LeveledFor("a.b"), lt.RawFor("a.c")
	l.Info("info")
	l.Warning("warning")
	fmt.Fprintln(raw, "raw")
	l.Error("error")
	l.Info("info again")

	want := []string{"a.b: warning", "a.b: error"}
	for _, tc := range []struct {
		min  Severity
		want []string
	}{
		{INFO, []string{"a.b: info", "a.b: warning", "a.c: raw", "a.b: error", "a.b: info again"}},
		{WARNING, want},
		{ERROR, []string{"a.b: error"}},
		{FATAL, nil},
	} {
		r := mustRead(t, lt, "a", WithChildren(), WithBacklog(BacklogAll), WithMinimumSeverity(tc.min))
		if diff := cmp.Diff(tc.want, texts(r.Backlog), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("backlog at %v mismatch (-want +got):\n%s", tc.min, diff)
		}
	}
	// The limit counts matching entries only.
	r := mustRead(t, lt, "a", WithChildren(), WithBacklog(1), WithMinimumSeverity(WARNING))
	if diff := cmp.Diff(want[1:], texts(r.Backlog)); diff != "" {
		t.Errorf("WithBacklog(1) at WARNING mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, texts(receive(t, stream, 2))); diff != "" {
		t.Errorf("stream at WARNING mismatch (-want +got):\n%s", diff)
	}
	assertEmpty(t, stream)
}

func TestStream(t *testing.T) {
	lt := New()
	lt.LeveledFor("a").Info("before")
	parent := mustRead(t, lt, "a", WithStream())
	tree := mustRead(t, lt, "a", WithStream(), WithChildren())
	child := mustRead(t, lt, "a.b.c", WithStream())
	if parent.Backlog != nil {
		t.Errorf("Backlog without WithBacklog = %v, want nil", parent.Backlog)
	}

	lt.LeveledFor("a").Info("1")
	lt.LeveledFor("a.b.c").Info("2")
	lt.LeveledFor("a.bb").Info("3")
	lt.LeveledFor("b").Info("4")
	fmt.Fprint(lt.RawFor("a.b.c"), "5\n")

	if diff := cmp.Diff([]string{"a: 1"}, texts(receive(t, parent, 1))); diff != "" {
		t.Errorf("stream of a mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a: 1", "a.b.c: 2", "a.bb: 3", "a.b.c: 5"}, texts(receive(t, tree, 4))); diff != "" {
		t.Errorf("stream of a with children mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a.b.c: 2", "a.b.c: 5"}, texts(receive(t, child, 2))); diff != "" {
		t.Errorf("stream of a.b.c mismatch (-want +got):\n%s", diff)
	}
	for _, r := range []*LogReader{parent, tree, child} {
		assertEmpty(t, r)
		if d := r.Dropped(); d != 0 {
			t.Errorf("Dropped() = %d, want 0", d)
		}
	}
}

func TestStreamClose(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("a")
	r := mustRead(t, lt, "a", WithStream())
	l.Info("buffered")
	r.Close()
	r.Close()
	l.Info("after close")
	if diff := cmp.Diff([]string{"a: buffered"}, texts(receive(t, r, 1))); diff != "" {
		t.Errorf("entries buffered before Close mismatch (-want +got):\n%s", diff)
	}
	if e, ok := <-r.Stream; ok {
		t.Errorf("stream after Close delivered %q, want closed channel", e)
	}
	lt.mu.Lock()
	readers := len(lt.lookupLocked([]string{"a"}).readers)
	lt.mu.Unlock()
	if readers != 0 {
		t.Errorf("node a has %d readers after Close, want 0", readers)
	}
	// A backlog-only reader drops nothing, and closing it is harmless.
	b := mustRead(t, lt, "a", WithBacklog(1))
	if d := b.Dropped(); d != 0 {
		t.Errorf("Dropped() of a backlog-only reader = %d, want 0", d)
	}
	b.Close()
}

// TestBacklogThenStream checks that a reader asking for both gets every entry
// exactly once, although loggers run while it subscribes.
func TestBacklogThenStream(t *testing.T) {
	const entries = 2000
	lt := New(WithNodeBacklog(entries))
	l := lt.LeveledFor("a.b")
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range entries {
			if i == entries/4 {
				close(started)
			}
			l.Info(i)
		}
	})
	<-started
	r := mustRead(t, lt, "a", WithChildren(), WithBacklog(BacklogAll), WithStream(), withStreamBuffer(entries))
	wg.Wait()
	got := append(r.Backlog, receive(t, r, entries-len(r.Backlog))...)
	for i, e := range got {
		if e.Message != strconv.Itoa(i) {
			t.Fatalf("entry %d is %q, want %d (backlog had %d)", i, e.Message, i, len(r.Backlog))
		}
	}
	assertEmpty(t, r)
}

// TestSlowReaderDoesNotBlock logs far more than a reader's buffer holds to a
// reader that does not read: the logger must finish, the reader must see
// what fit, how much it lost, and then what came after.
func TestSlowReaderDoesNotBlock(t *testing.T) {
	const buffer, entries = 8, 1000
	lt := New()
	l := lt.LeveledFor("a")
	slow := mustRead(t, lt, "", WithChildren(), WithStream(), withStreamBuffer(buffer))
	fast := mustRead(t, lt, "a", WithStream(), withStreamBuffer(entries+1))

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range entries {
			l.Info(i)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("logger still blocked after 30s by a reader that does not read")
	}

	if got, want := slow.Dropped(), uint64(entries-buffer); got != want {
		t.Errorf("Dropped() = %d, want %d", got, want)
	}
	var want []string
	for i := range buffer {
		want = append(want, "a: "+strconv.Itoa(i))
	}
	if diff := cmp.Diff(want, texts(receive(t, slow, buffer))); diff != "" {
		t.Errorf("entries that fit mismatch (-want +got):\n%s", diff)
	}
	assertEmpty(t, slow)

	// Now there is room: the next entry comes after a note of the loss.
	l.Info("recovered")
	got := receive(t, slow, 2)
	note := got[0]
	wantNote := fmt.Sprintf("logtree: reader fell behind, %d entries dropped", entries-buffer)
	if note.Severity != WARNING || note.Message != wantNote || note.DN != "" || note.File != "" {
		t.Errorf("note = %+v, want a WARNING of the root DN saying %q", note, wantNote)
	}
	if got[1].Message != "recovered" {
		t.Errorf("entry after the note = %q, want %q", got[1].Message, "recovered")
	}
	if got := slow.Dropped(); got != entries-buffer {
		t.Errorf("Dropped() after recovery = %d, want %d", got, entries-buffer)
	}
	// A reader that kept up lost nothing.
	if n := len(receive(t, fast, entries+1)); n != entries+1 || fast.Dropped() != 0 {
		t.Errorf("fast reader: %d entries, %d dropped; want %d, 0", n, fast.Dropped(), entries+1)
	}
}

func TestReadErrors(t *testing.T) {
	lt := New()
	for _, tc := range []struct {
		name string
		dn   DN
		opts []ReadOption
		want string
	}{
		{"nothing asked", "a", nil, "neither WithBacklog nor WithStream"},
		{"children only", "a", []ReadOption{WithChildren()}, "neither WithBacklog nor WithStream"},
		{"bad backlog", "a", []ReadOption{WithBacklog(-2)}, "invalid backlog size -2"},
		{"empty part", "a..b", []ReadOption{WithStream()}, `invalid DN "a..b"`},
		{"trailing dot", "a.", []ReadOption{WithBacklog(1)}, `invalid DN "a."`},
	} {
		r, err := lt.Read(tc.dn, tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Read(%q) = %v, %v, want error containing %q", tc.name, tc.dn, r, err, tc.want)
		}
	}
}

// TestConcurrentUse runs loggers, readers opening and closing and the
// console together, for the race detector.
func TestConcurrentUse(t *testing.T) {
	lt := New(WithNodeBacklog(64))
	stop := lt.Console(nopWriter{})
	defer stop()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			l := lt.LeveledFor(DN(fmt.Sprintf("root.n%d.x", i%2)))
			raw := lt.RawFor(DN(fmt.Sprintf("root.raw%d", i)))
			defer raw.Close()
			for j := range 500 {
				l.Infof("%d", j)
				fmt.Fprintf(raw, "line %d\n", j)
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 50 {
				r, err := lt.Read("root", WithChildren(), WithBacklog(10), WithStream(), withStreamBuffer(4))
				if err != nil {
					t.Errorf("Read: %v", err)
					return
				}
				for range len(r.Backlog) {
					select {
					case <-r.Stream:
					default:
					}
				}
				r.Close()
			}
		})
	}
	wg.Wait()
	merged := backlog(t, lt, "root")
	if n := len(merged); n != 6*64 {
		t.Errorf("backlog of root has %d entries, want %d (6 nodes of 64)", n, 6*64)
	}
	for i := 1; i < len(merged); i++ {
		if merged[i].Time.Before(merged[i-1].Time) {
			t.Errorf("merged backlog out of time order at %d: %v after %v", i, merged[i].Time, merged[i-1].Time)
		}
	}
}
