package launch

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
