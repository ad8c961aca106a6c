package logtree

import (
	"bytes"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// rawMessages returns the messages of the raw entries of dn, failing t on
// leveled ones.
func rawMessages(t *testing.T, lt *LogTree, dn DN) []string {
	t.Helper()
	var out []string
	for _, e := range backlog(t, lt, dn) {
		if !e.Raw || e.Severity != INFO || e.File != "" || e.Line != 0 || e.DN != dn {
			t.Errorf("entry %+v is not a raw entry of %q", e, dn)
		}
		out = append(out, e.Message)
	}
	return out
}

func TestRawLines(t *testing.T) {
	x := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name   string
		writes []string
		// flushed is what is logged before Close, closed after.
		flushed, closed []string
	}{
		{name: "nothing"},
		{name: "one line", writes: []string{"hello\n"}, flushed: []string{"hello"}},
		{name: "several lines", writes: []string{"a\nb\nc\n"}, flushed: []string{"a", "b", "c"}},
		{name: "empty lines", writes: []string{"\n\na\n"}, flushed: []string{"", "", "a"}},
		{
			name:    "partial line held until newline",
			writes:  []string{"hel", "lo", " world\nnext"},
			flushed: []string{"hello world"},
			closed:  []string{"next"},
		},
		{name: "partial line flushed by close", writes: []string{"no newline"}, closed: []string{"no newline"}},
		{name: "carriage return kept", writes: []string{"a\r\n"}, flushed: []string{"a\r"}},
		{name: "exactly the limit", writes: []string{x(MaxRawLine) + "\n"}, flushed: []string{x(MaxRawLine)}},
		{
			name:    "long line split",
			writes:  []string{x(2*MaxRawLine+10) + "\nend\n"},
			flushed: []string{x(MaxRawLine), x(MaxRawLine), x(10), "end"},
		},
		{
			name:    "long line split across writes",
			writes:  []string{x(MaxRawLine - 1), "yy", x(MaxRawLine - 1), "\n"},
			flushed: []string{x(MaxRawLine-1) + "y", "y" + x(MaxRawLine-1)},
		},
		{
			name:    "long partial line split before close",
			writes:  []string{x(MaxRawLine + 1)},
			flushed: []string{x(MaxRawLine)},
			closed:  []string{"x"},
		},
		{
			// "é" is two bytes; cutting at the limit would halve it.
			name:    "split keeps characters whole",
			writes:  []string{x(MaxRawLine-1) + "é\n"},
			flushed: []string{x(MaxRawLine - 1), "é"},
		},
		{
			name:    "split keeps characters whole across writes",
			writes:  []string{x(MaxRawLine - 2), "€", "\n"},
			flushed: []string{x(MaxRawLine - 2), "€"},
		},
		{
			name:    "invalid UTF-8 cut at the limit",
			writes:  []string{x(MaxRawLine-1) + "\xff\xfe\n"},
			flushed: []string{x(MaxRawLine-1) + "\xff", "\xfe"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := New()
			w := lt.RawFor("proc")
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v, want %d, nil", s, n, err, len(s))
				}
			}
			if diff := cmp.Diff(tc.flushed, rawMessages(t, lt, "proc"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("before Close (-want +got):\n%s", diff)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			want := append(append([]string{}, tc.flushed...), tc.closed...)
			if diff := cmp.Diff(want, rawMessages(t, lt, "proc"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("after Close (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRawClosed(t *testing.T) {
	lt := New()
	w := lt.RawFor("proc")
	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	for i := range 2 {
		if err := w.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if n, err := w.Write([]byte("late\n")); n != 0 || !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Write after Close = %d, %v, want 0, fs.ErrClosed", n, err)
	}
	if diff := cmp.Diff([]string{"partial"}, rawMessages(t, lt, "proc")); diff != "" {
		t.Errorf("entries mismatch (-want +got):\n%s", diff)
	}
}

// TestRawConcurrentWriters checks that whole lines written at once by
// several goroutines are never mixed up.
func TestRawConcurrentWriters(t *testing.T) {
	const writers, lines = 4, 200
	lt := New()
	w := lt.RawFor("proc")
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			line := []byte(strings.Repeat(string(rune('a'+i)), 50) + "\n")
			for range lines {
				if _, err := w.Write(line); err != nil {
					t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	w.Close()
	got := rawMessages(t, lt, "proc")
	if len(got) != writers*lines {
		t.Fatalf("got %d entries, want %d", len(got), writers*lines)
	}
	for _, m := range got {
		if len(m) != 50 || strings.Count(m, m[:1]) != 50 {
			t.Fatalf("mixed-up line %q", m)
		}
	}
}

// splitAll runs data through a lineSplitter of the given limit, chunk bytes
// per write, and returns the emitted lines after a final flush.
func splitAll(data []byte, limit, chunk int) []string {
	var out []string
	s := lineSplitter{limit: limit, emit: func(l []byte) { out = append(out, string(l)) }}
	for len(data) > 0 {
		n := min(chunk, len(data))
		s.write(data[:n])
		data = data[n:]
	}
	s.flush()
	return out
}

// splitModel is the obvious, whole-input version of the lineSplitter.
func splitModel(data []byte, limit int) []string {
	var out []string
	lines := bytes.Split(data, []byte("\n"))
	for i, line := range lines {
		if i == len(lines)-1 && len(line) == 0 {
			break // no partial line at the end
		}
		for len(line) > limit {
			cut := cutPoint(line, limit)
			out = append(out, string(line[:cut]))
			line = line[cut:]
		}
		out = append(out, string(line))
	}
	return out
}

func FuzzLineSplitter(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), uint8(3))
	f.Add([]byte("a line longer than the limit\nshort\npartial"), uint8(1))
	f.Add([]byte("\n\n\n"), uint8(0))
	f.Add([]byte("aaaaaé€𝄞𝄞𝄞\nbbbbbbbb\xff\xfe\xfd\n"), uint8(4))
	f.Add([]byte("aaaaaaa\xf0\x9d\x84\n"), uint8(9))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		const limit = 8
		got := splitAll(data, limit, int(chunk)+1)
		if diff := cmp.Diff(splitModel(data, limit), got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("split of %q in chunks of %d mismatch (-model +got):\n%s", data, int(chunk)+1, diff)
		}
		joined := strings.Join(got, "")
		if want := strings.ReplaceAll(string(data), "\n", ""); joined != want {
			t.Fatalf("lines of %q join to %q, want %q", data, joined, want)
		}
		valid := utf8.Valid(data)
		for _, l := range got {
			if len(l) > limit || strings.Contains(l, "\n") {
				t.Fatalf("split of %q gave line %q: longer than %d or has a newline", data, l, limit)
			}
			if valid && !utf8.ValidString(l) {
				t.Fatalf("split of valid UTF-8 %q gave invalid line %q", data, l)
			}
		}
	})
}

func TestCutPoint(t *testing.T) {
	for _, tc := range []struct {
		p     string
		limit int
		want  int
	}{
		{"abcdef", 4, 4},
		{"abcé", 4, 3},             // é is c3 a9: its first byte is at 3
		{"abcéd", 5, 5},            // é ends at the limit
		{"ab€", 4, 2},              // € is e2 82 ac
		{"a𝄞", 4, 1},               // 𝄞 is f0 9d 84 9e
		{"a𝄞", 5, 5},               // whole
		{"\x80\x80\x80\x80", 4, 4}, // no character start at all
		{"\xff\xff\xff\xff", 4, 4}, // invalid bytes
		{"𝄞", 3, 3},                // cannot do better than the limit
	} {
		if got := cutPoint([]byte(tc.p), tc.limit); got != tc.want {
			t.Errorf("cutPoint(%q, %d) = %d, want %d", tc.p, tc.limit, got, tc.want)
		}
	}
}
