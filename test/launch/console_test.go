package launch

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/logtree"
)

// texts returns the text of every line.
func texts(lines []Line) []string {
	var s []string
	for _, l := range lines {
		s = append(s, l.Text)
	}
	return s
}

func TestConsoleLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []string
	}{
		{"one line", []string{"hello\n"}, []string{"hello"}},
		{"split across reads", []string{"hel", "lo wor", "ld\nsec", "ond\n"}, []string{"hello world", "second"}},
		{"several in one read", []string{"a\nb\nc\n"}, []string{"a", "b", "c"}},
		{"carriage returns", []string{"kernel\r\n", "line\r", "\n"}, []string{"kernel", "line"}},
		{"unterminated last line", []string{"a\npartial"}, []string{"a", "partial"}},
		{"empty lines kept", []string{"\n\nx\n"}, []string{"", "", "x"}},
		{
			"firmware escapes",
			[]string{"\x1b[2J\x1b[01;01H\x1b[=3hBdsDxe: loading\r\n", "\x1b[1m\x1b[33mMapping\x1b[0m table\n"},
			[]string{"BdsDxe: loading", "Mapping table"},
		},
		{"escape split across reads", []string{"a\x1b[0", "1;01Hb\n"}, []string{"ab"}},
		{"two-byte escape", []string{"\x1bcreset\n"}, []string{"reset"}},
		{
			// A kernel message between a program's line and its newline.
			"kernel message within a line",
			[]string{"@cairn-mark consensus-running voting=true[   12.996085] cryptd: max_cpu_qlen set to 1000\r\n\r\n"},
			[]string{"@cairn-mark consensus-running voting=true", "[   12.996085] cryptd: max_cpu_qlen set to 1000", ""},
		},
		{
			"two kernel messages within a line",
			[]string{"[   13.021049] cairn: watchdog armed[   12.9] no stamp[    1.000001] a[    1.000002] b\n"},
			[]string{"[   13.021049] cairn: watchdog armed[   12.9] no stamp", "[    1.000001] a", "[    1.000002] b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewConsole()
			for _, ch := range tc.chunks {
				if _, err := c.Write([]byte(ch)); err != nil {
					t.Fatalf("Write(%q): %v", ch, err)
				}
			}
			c.Close()
			got := c.Lines()
			if diff := cmp.Diff(tc.want, texts(got)); diff != "" {
				t.Errorf("lines of %q (-want +got):\n%s", tc.chunks, diff)
			}
			for i, l := range got {
				if l.Index != i {
					t.Errorf("line %d has Index %d", i, l.Index)
				}
			}
		})
	}
}

// TestConsoleLineTimes checks that a line is stamped when its end arrives.
func TestConsoleLineTimes(t *testing.T) {
	c := NewConsole()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	c.now = func() time.Time { return now }
	c.Write([]byte("first half "))
	now = t0.Add(time.Second)
	c.Write([]byte("second half\nnext"))
	now = t0.Add(2 * time.Second)
	c.Close()
	want := []Line{
		{Index: 0, Time: t0.Add(time.Second), Text: "first half second half"},
		{Index: 1, Time: t0.Add(2 * time.Second), Text: "next"},
	}
	if diff := cmp.Diff(want, c.Lines()); diff != "" {
		t.Errorf("Lines() (-want +got):\n%s", diff)
	}
}

func TestWaitForSeesEarlierLines(t *testing.T) {
	c := NewConsole()
	c.Write([]byte("[    0.000000] Linux version 6.1.0\nnoise\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := c.WaitFor(ctx, Substring("Linux version"))
	if err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	if l.Index != 0 {
		t.Errorf("WaitFor found line %d, want 0", l.Index)
	}
	re := regexp.MustCompile(`^noi`)
	if l, err := c.WaitFor(ctx, re); err != nil || l.Text != "noise" {
		t.Errorf("WaitFor(%v) = %q, %v, want %q", re, l.Text, err, "noise")
	}
}

func TestWaitForBlocksUntilLine(t *testing.T) {
	c := NewConsole()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan Line, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := c.WaitFor(ctx, Substring("supervisor started"))
		got <- l
		errc <- err
	}()
	// Lines that do not match, and the matching one in pieces.
	for _, s := range []string{"a\n", "b\n", "[ 1.5] cairn: supervisor", " started\n"} {
		c.Write([]byte(s))
		time.Sleep(time.Millisecond)
	}
	if err := <-errc; err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	if l := <-got; l.Index != 2 || l.Text != "[ 1.5] cairn: supervisor started" {
		t.Errorf("WaitFor = line %d %q, want line 2", l.Index, l.Text)
	}
}

func TestWaitFromSkipsEarlierLines(t *testing.T) {
	c := NewConsole()
	c.Write([]byte("Linux version 1\nroot runnable failed\nLinux version 2\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fail, err := c.WaitFor(ctx, Substring("root runnable failed"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.WaitFrom(ctx, fail.Index+1, Substring("Linux version"))
	if err != nil || l.Text != "Linux version 2" {
		t.Errorf("WaitFrom(%d) = %q, %v, want %q", fail.Index+1, l.Text, err, "Linux version 2")
	}
}

func TestWaitForEnds(t *testing.T) {
	t.Run("console closed", func(t *testing.T) {
		c := NewConsole()
		c.Write([]byte("last words\n"))
		go func() {
			time.Sleep(10 * time.Millisecond)
			c.Close()
		}()
		_, err := c.WaitFor(context.Background(), Substring("never"))
		if !errors.Is(err, ErrConsoleClosed) {
			t.Errorf("WaitFor after Close = %v, want ErrConsoleClosed", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		c := NewConsole()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := c.WaitFor(ctx, Substring("never"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitFor past deadline = %v, want DeadlineExceeded", err)
		}
		if !strings.Contains(err.Error(), `"never"`) {
			t.Errorf("WaitFor error %q does not name what it waited for", err)
		}
	})
	t.Run("a closed console still answers from its lines", func(t *testing.T) {
		c := NewConsole()
		c.Write([]byte("powering off"))
		c.Close()
		if _, err := c.WaitFor(context.Background(), Substring("powering off")); err != nil {
			t.Errorf("WaitFor on closed console: %v", err)
		}
	})
}

func TestMark(t *testing.T) {
	const serving = `I1123 18:55:00.123456 root.roleserve.curator w.go:12] @cairn-mark curator-serving addr=10.42.0.10:7833`
	const refused = `E1123 18:55:00.123456 root.cluster j.go:1] @cairn-mark refused reason="wrong register ticket"`
	for _, tc := range []struct {
		line string
		m    MarkMatcher
		want bool
	}{
		{serving, Mark(marker.CuratorServing), true},
		{serving, Mark(marker.CuratorServing, "addr", "10.42.0.10:7833"), true},
		{serving, Mark(marker.CuratorServing, "addr", "10.42.0.11:7833"), false},
		{serving, Mark(marker.CuratorServing, "node", ""), false},
		{serving, Mark(marker.CuratorLeading), false},
		{refused, Mark(marker.Refused, "reason", "wrong register ticket"), true},
		{"[ 1.0] " + marker.Format(marker.Joined, "node", "cairn-01", "via", "cold-start"), Mark(marker.Joined, "via", "cold-start"), true},
		{marker.Format(marker.Joined, "node", "cairn-01", "via", "curator"), Mark(marker.Joined, "node", "cairn-01", "via", "cold-start"), false},
		{marker.Format(marker.Roles, "roles", ""), Mark(marker.Roles, "roles", ""), true},
		// Wording is no marker, however close.
		{"I1123 x.go:1] roleserve: curator serving on 10.42.0.10:7833", Mark(marker.CuratorServing), false},
		{"I1123 x.go:1] @cairn-mark curator-serving addr", Mark(marker.CuratorServing), false},
		{"", Mark(marker.Bootstrapping), false},
	} {
		if got := tc.m.MatchString(tc.line); got != tc.want {
			t.Errorf("%v.MatchString(%q) = %v, want %v", tc.m, tc.line, got, tc.want)
		}
	}
}

func TestMarkOddFieldsPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Mark with a key and no value did not panic")
		}
	}()
	// Built at run time: staticcheck rightly refuses an odd literal list.
	odd := strings.Fields("node")
	Mark(marker.Joined, odd...)
}

// TestWaitForMark states markers the way a node does, through a log tree
// whose console feeds the Console, and reads a field of the one a wait
// matched.
func TestWaitForMark(t *testing.T) {
	c := NewConsole()
	lt := logtree.New()
	stop := lt.Console(c)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cluster := lt.LeveledFor("root.cluster")
	marker.Log(cluster, marker.Registering, "node", "cairn-0123456789abcdef")
	cluster.Info("waiting for approval as cairn-0123456789abcdef")
	marker.Log(cluster, marker.WaitingForApproval, "node", "cairn-0123456789abcdef")
	marker.Log(cluster, marker.Committed, "node", "cairn-0123456789abcdef")

	l, err := c.WaitFor(ctx, Mark(marker.WaitingForApproval))
	if err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	m, ok := l.Marker()
	if !ok || m.Name != marker.WaitingForApproval || m.Get("node") != "cairn-0123456789abcdef" {
		t.Errorf("Marker() of %q = %+v, %v, want %s with node cairn-0123456789abcdef", l.Text, m, ok, marker.WaitingForApproval)
	}
	if l.Index != 2 {
		t.Errorf("WaitFor(%v) = line %d %q, want line 2", Mark(marker.WaitingForApproval), l.Index, l.Text)
	}
	if _, err := c.WaitFrom(ctx, l.Index+1, Mark(marker.Committed, "node", "cairn-0123456789abcdef")); err != nil {
		t.Errorf("WaitFrom for the commit: %v", err)
	}
	if m, ok := (Line{Text: "I1123 x.go:1] committed as cairn-0123456789abcdef"}).Marker(); ok {
		t.Errorf("Marker() of a plain line = %+v, want none", m)
	}

	short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancelShort()
	_, err = c.WaitFor(short, Mark(marker.Committed, "node", "cairn-ffffffffffffffff"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "@cairn-mark committed node=cairn-ffffffffffffffff") {
		t.Errorf("WaitFor of a marker never stated = %v, want DeadlineExceeded naming the marker", err)
	}
}

func TestUptime(t *testing.T) {
	for _, tc := range []struct {
		text string
		want time.Duration
		ok   bool
	}{
		{"[    0.000000] Linux version 6.1.0-28-amd64", 0, true},
		{"[    2.345678] cairn: init started (kernel 6.1.0)", 2345678 * time.Microsecond, true},
		{"[  123.500000] cairn: supervisor started", 123500 * time.Millisecond, true},
		{"[1.25]x", 1250 * time.Millisecond, true},
		{"BdsDxe: loading Boot0001", 0, false},
		{"[ abc] nope", 0, false},
		{" [ 1.0] not at the start", 0, false},
		{"", 0, false},
	} {
		got, ok := Line{Text: tc.text}.Uptime()
		if got != tc.want || ok != tc.ok {
			t.Errorf("Line{%q}.Uptime() = %v, %v, want %v, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTail(t *testing.T) {
	c := NewConsole()
	c.Write([]byte("1\n2\n3\n"))
	if got, want := c.Tail(2), "2\n3\n"; got != want {
		t.Errorf("Tail(2) = %q, want %q", got, want)
	}
	if got, want := c.Tail(10), "1\n2\n3\n"; got != want {
		t.Errorf("Tail(10) = %q, want %q", got, want)
	}
}

// FuzzConsole feeds the console what a guest may print, cut anywhere: the
// lines never depend on where reads split the bytes, and the console never
// panics or loses a line.
func FuzzConsole(f *testing.F) {
	f.Add([]byte("[    0.000000] Linux version\r\n\x1b[2Jx\n"), uint8(3))
	f.Add([]byte("\x1b["), uint8(1))
	f.Add([]byte("\n\n\r\x1b[=3h"), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		whole := NewConsole()
		whole.Write(data)
		whole.Close()

		pieces := NewConsole()
		step := int(cut)%7 + 1
		for i := 0; i < len(data); i += step {
			pieces.Write(data[i:min(i+step, len(data))])
		}
		pieces.Close()

		a, b := texts(whole.Lines()), texts(pieces.Lines())
		if diff := cmp.Diff(a, b); diff != "" {
			t.Errorf("lines depend on read size %d (-whole +pieces):\n%s", step, diff)
		}
		if n := strings.Count(string(data), "\n"); len(a) < n || len(a) > n+1 {
			t.Errorf("%d lines from %d newlines", len(a), n)
		}
		for _, l := range whole.Lines() {
			l.Uptime()
		}
	})
}
