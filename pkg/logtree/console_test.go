package logtree

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/pkg/fixture"
)

// gateWriter holds every Write until open is closed, like a stuck serial
// line. entered is closed by the first Write.
type gateWriter struct {
	fixture.SyncBuffer
	open, entered chan struct{}
	once          sync.Once
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.open
	return g.SyncBuffer.Write(p)
}

// lines renders entries as the console prints them.
func lines(es []*LogEntry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestConsole(t *testing.T) {
	lt := New()
	lt.LeveledFor("root.net").Error("before the console")
	var all, net fixture.SyncBuffer
	stopAll := lt.Console(&all)
	stopNet := lt.Console(&net, ConsoleDN("root.net"), ConsoleMinimumSeverity(WARNING))

	l := lt.LeveledFor("root.net.dhcp")
	l.Info("lease requested")
	l.Warningf("no offer after %d tries", 3)
	fmt.Fprintln(lt.RawFor("root.net"), "raw output")
	lt.LeveledFor("root.netx").Error("not below root.net")
	lt.LeveledFor("root.net").Error("two\nlines")
	stopAll()
	stopNet()
	l.Error("after stop")

	every := backlog(t, lt, "")
	wantAll := lines(every[1 : len(every)-1])
	if diff := cmp.Diff(wantAll, all.String()); diff != "" {
		t.Errorf("console of everything mismatch (-want +got):\n%s", diff)
	}
	// Pick the expected lines by hand rather than through Read's filter,
	// which the console itself uses.
	wantNet := lines([]*LogEntry{every[2], every[5]})
	if !strings.Contains(wantNet, "no offer after 3 tries") || strings.Count(wantNet, "\n") != 3 {
		t.Fatalf("test bug: picked %q", wantNet)
	}
	if diff := cmp.Diff(wantNet, net.String()); diff != "" {
		t.Errorf("console of root.net at WARNING mismatch (-want +got):\n%s", diff)
	}
	stopAll() // twice is harmless
}

func TestConsoleNormalizesDN(t *testing.T) {
	lt := New()
	var out fixture.SyncBuffer
	stop := lt.Console(&out, ConsoleDN(".a..b"))
	lt.LeveledFor("a.b.c").Info("in")
	lt.LeveledFor("a").Info("out")
	stop()
	if got := out.String(); !strings.Contains(got, "a.b.c") || strings.Contains(got, "] out") {
		t.Errorf("ConsoleDN(%q) printed %q, want only the entry of a.b.c", ".a..b", got)
	}
}

// TestConsoleStuckWriter checks that a console whose writer is stuck never
// holds up loggers, and says how much it lost once the writer moves again.
func TestConsoleStuckWriter(t *testing.T) {
	const entries = consoleStreamBuffer + 500
	lt := New()
	w := &gateWriter{open: make(chan struct{}), entered: make(chan struct{})}
	stop := lt.Console(w)
	l := lt.LeveledFor("a")
	l.Info(0)
	<-w.entered // The console is now stuck writing entry 0.

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i < entries; i++ {
			l.Info(i)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("logger still blocked after 30s by a stuck console")
	}
	close(w.open)
	stop()

	got := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	printed := consoleStreamBuffer + 1 // the one being written, and the buffer
	if len(got) != printed+1 {
		t.Fatalf("console printed %d lines, want %d entries and a note", len(got), printed)
	}
	for i, line := range got[:printed] {
		if !strings.HasSuffix(line, "] "+strconv.Itoa(i)) {
			t.Fatalf("line %d = %q, want entry %d", i, line, i)
		}
	}
	wantNote := fmt.Sprintf("] logtree: reader fell behind, %d entries dropped", entries-printed)
	if note := got[printed]; !strings.HasPrefix(note, "W") || !strings.HasSuffix(note, wantNote) {
		t.Errorf("last line = %q, want a warning ending in %q", note, wantNote)
	}
}

func TestConsoleQuiet(t *testing.T) {
	lt := New()
	var out fixture.SyncBuffer
	stop := lt.Console(&out, ConsoleQuiet("root.kube", WARNING))
	lt.LeveledFor("root.kube.apiserver").Info("chatty")
	fmt.Fprintln(lt.RawFor("root.kube.kubelet"), "raw chatter")
	lt.LeveledFor("root.kube.kubelet").Warning("kubelet warns")
	lt.LeveledFor("root.kubelike").Info("not below root.kube")
	lt.LeveledFor("root").Info("elsewhere")
	stop()
	got := out.String()
	for _, want := range []string{"kubelet warns", "not below root.kube", "elsewhere"} {
		if !strings.Contains(got, want) {
			t.Errorf("console lacks %q:\n%s", want, got)
		}
	}
	for _, quiet := range []string{"chatty", "raw chatter"} {
		if strings.Contains(got, quiet) {
			t.Errorf("console shows %q from a quiet subtree:\n%s", quiet, got)
		}
	}
}
