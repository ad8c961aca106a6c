package logtree

import (
	"errors"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// callerLine returns the line it is called from.
func callerLine() int {
	_, _, line, _ := runtime.Caller(1)
	return line
}

// backlog returns every entry of dn and below, failing t on error.
func backlog(t *testing.T, lt *LogTree, dn DN, opts ...ReadOption) []*LogEntry {
	t.Helper()
	r, err := lt.Read(dn, append([]ReadOption{WithChildren(), WithBacklog(BacklogAll)}, opts...)...)
	if err != nil {
		t.Fatalf("Read(%q): %v", dn, err)
	}
	defer r.Close()
	return r.Backlog
}

// source is the part of an entry the leveled logger decides.
type source struct {
	Severity Severity
	File     string
	Line     int
	Message  string
}

func sources(es []*LogEntry) []source {
	out := make([]source, len(es))
	for i, e := range es {
		out[i] = source{e.Severity, e.File, e.Line, e.Message}
	}
	return out
}

func TestLeveledMethods(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("root.net")
	base := callerLine()
	l.Info("info ", 1)
	l.Infof("infof %d", 2)
	l.Warning("warning", 3)
	l.Warningf("warningf %d", 4)
	l.Error(errors.New("error"))
	l.Errorf("errorf %d\n\n", 6)
	l.Info("two\nlines\n")

	const f = "leveled_test.go"
	want := []source{
		{INFO, f, base + 1, "info 1"},
		{INFO, f, base + 2, "infof 2"},
		{WARNING, f, base + 3, "warning3"},
		{WARNING, f, base + 4, "warningf 4"},
		{ERROR, f, base + 5, "error"},
		{ERROR, f, base + 6, "errorf 6"},
		{INFO, f, base + 7, "two\nlines"},
	}
	got := backlog(t, lt, "")
	if diff := cmp.Diff(want, sources(got)); diff != "" {
		t.Errorf("entries mismatch (-want +got):\n%s", diff)
	}
	for _, e := range got {
		if e.DN != "root.net" || e.Raw || e.Time.IsZero() {
			t.Errorf("entry %q: DN %q, Raw %v, Time %v; want root.net, false, set", e.Message, e.DN, e.Raw, e.Time)
		}
	}
}

// logFor logs msg on behalf of its caller.
func logFor(l LeveledLogger, msg string) {
	l.WithAddedStackDepth(1).Warning(msg)
}

// logForIndirectly logs msg on behalf of its caller, through logFor.
func logForIndirectly(l LeveledLogger, msg string) {
	logFor(l.WithAddedStackDepth(1), msg)
}

func TestWithAddedStackDepth(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("helpers")
	base := callerLine()
	logFor(l, "one up")
	logForIndirectly(l, "two up")
	l.WithAddedStackDepth(0).Info("no change")
	func() {
		l.WithAddedStackDepth(1).Info("closure's caller")
	}()
	l.WithAddedStackDepth(-5).Info("clamped")
	clampedLine := callerLine() - 1

	const f = "leveled_test.go"
	want := []source{
		{WARNING, f, base + 1, "one up"},
		{WARNING, f, base + 2, "two up"},
		{INFO, f, base + 3, "no change"},
		{INFO, f, base + 6, "closure's caller"},
		{INFO, f, clampedLine, "clamped"},
	}
	if diff := cmp.Diff(want, sources(backlog(t, lt, "helpers"))); diff != "" {
		t.Errorf("entries mismatch (-want +got):\n%s", diff)
	}
}

// TestLeveledLocationCache logs from one call site many times and from
// another once, to check that cached locations are not mixed up.
func TestLeveledLocationCache(t *testing.T) {
	lt := New()
	l := lt.LeveledFor("cache")
	var lines []int
	for range 3 {
		lines = append(lines, callerLine()+1)
		l.Info("loop")
	}
	lines = append(lines, callerLine()+1)
	l.Info("after")
	var got []int
	for _, e := range backlog(t, lt, "cache") {
		got = append(got, e.Line)
	}
	if diff := cmp.Diff(lines, got); diff != "" {
		t.Errorf("lines mismatch (-want +got):\n%s", diff)
	}
}

func TestLeveledForNormalizesDN(t *testing.T) {
	lt := New()
	lt.LeveledFor(".a..b.").Info("x")
	got := backlog(t, lt, "a.b")
	if len(got) != 1 || got[0].DN != "a.b" {
		t.Errorf("LeveledFor(%q) logged %v, want one entry in a.b", ".a..b.", got)
	}
}

func TestLeveledForReusesLoggers(t *testing.T) {
	lt := New()
	a := lt.LeveledFor("a")
	if lt.LeveledFor("a") != a {
		t.Errorf("LeveledFor(%q) twice gave two loggers, want the same", "a")
	}
	if lt.LeveledFor("a.b") == a || a.WithAddedStackDepth(1) == a {
		t.Errorf("a logger of another DN or depth is the logger of %q", "a")
	}
}
