package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cairn.dev/cairn/node/marker"
)

// Line is one line of a node's serial console.
type Line struct {
	// Index is the line's position on the console, counting from 0.
	Index int
	// Time is the host time at which the line's end was received.
	Time time.Time
	// Text is the line without its line ending and without terminal
	// control sequences (the firmware draws its screen with them).
	Text string
}

// uptimePrefix matches the "[    1.234567]" stamp that the kernel and Cairn
// put at the start of their console lines.
var uptimePrefix = regexp.MustCompile(`^\[\s*(\d+\.\d+)\]`)

// Uptime returns the guest uptime printed at the start of the line, if any.
func (l Line) Uptime() (time.Duration, bool) {
	m := uptimePrefix.FindStringSubmatch(l.Text)
	if m == nil {
		return 0, false
	}
	secs, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)).Round(time.Microsecond), true
}

// A Matcher picks console lines. Mark, for the markers a node states, is
// the one tests wait on; Substring and *regexp.Regexp serve the lines of
// /init's console protocol, the kernel and the firmware.
type Matcher interface {
	MatchString(s string) bool
}

// Substring matches lines that contain it.
type Substring string

// MatchString reports whether s contains the substring.
func (sub Substring) MatchString(s string) bool { return strings.Contains(s, string(sub)) }

// String returns the substring in quotes, for error messages.
func (sub Substring) String() string { return strconv.Quote(string(sub)) }

// MarkMatcher matches the lines that state a marker of node/marker: one
// name, and the field values it was given. Make it with Mark.
type MarkMatcher struct {
	name   marker.Name
	fields []string
}

// Mark matches lines that state the marker name with, for each key, value
// pair in fields, that value for that key; fields the pairs leave out may
// hold anything. It panics on an odd number of fields, a mistake in the
// test.
func Mark(name marker.Name, fields ...string) MarkMatcher {
	if len(fields)%2 != 0 {
		panic(fmt.Sprintf("launch.Mark(%q, %q): fields come in key, value pairs", name, fields))
	}
	return MarkMatcher{name: name, fields: fields}
}

// MatchString reports whether s states the marker with the fields.
func (m MarkMatcher) MatchString(s string) bool {
	got, ok := marker.Parse(s)
	return ok && got.Is(m.name, m.fields...)
}

// String returns the marker as a node states it, for error messages.
func (m MarkMatcher) String() string { return marker.Format(m.name, m.fields...) }

// Marker returns the marker the line states, if any: a line that Mark
// matched gives the values of the fields the matcher left open, such as
// a node's ID.
func (l Line) Marker() (marker.Marker, bool) { return marker.Parse(l.Text) }

// ErrConsoleClosed is returned by waits that can no longer succeed because
// the console ended (qemu exited) without a matching line.
var ErrConsoleClosed = errors.New("console closed")

// Console keeps every line a node printed and lets callers wait for lines,
// including ones printed before they started waiting. Write feeds it raw
// bytes in chunks of any size; Close ends it. It is safe for concurrent use.
type Console struct {
	now func() time.Time

	mu      sync.Mutex
	lines   []Line
	partial []byte
	closed  bool
	// changed is closed and replaced whenever a line is added or the
	// console is closed, waking every waiter.
	changed chan struct{}
}

// NewConsole returns an empty console.
func NewConsole() *Console {
	return &Console{now: time.Now, changed: make(chan struct{})}
}

// Write adds bytes read from the serial port; every completed line is
// stamped with the current host time. It never fails.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrConsoleClosed
	}
	now := c.now()
	rest := p
	added := false
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		c.partial = append(c.partial, rest[:i]...)
		c.addLocked(now)
		rest = rest[i+1:]
		added = true
	}
	c.partial = append(c.partial, rest...)
	if added {
		c.notifyLocked()
	}
	return len(p), nil
}

// Close flushes a last unterminated line and wakes every waiter for good.
func (c *Console) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if len(c.partial) > 0 {
		c.addLocked(c.now())
	}
	c.closed = true
	c.notifyLocked()
	return nil
}

func (c *Console) addLocked(now time.Time) {
	for _, text := range splitKernelLines(cleanLine(c.partial)) {
		c.lines = append(c.lines, Line{Index: len(c.lines), Time: now, Text: text})
	}
	c.partial = c.partial[:0]
}

// kernelStamp matches the stamp that starts a kernel message, "[   12.345678] ".
var kernelStamp = regexp.MustCompile(`\[ *\d+\.\d{6}\] `)

// splitKernelLines cuts text before each kernel message that does not
// start it. The kernel writes its messages to the serial port past the
// terminal that a program's writes go through, so one can land within a
// program's line, most often between its text and its newline (the
// terminal sends the newline apart, as "\r\n"): "cairn: clock
// unsynchronized[    4.643382] device-mapper: uevent: version 1.0.3".
// Cut, the program's line reads as it was written, and a marker in it
// parses; left whole, a wait for that marker would miss it.
func splitKernelLines(text string) []string {
	var parts []string
	for len(text) > 1 {
		loc := kernelStamp.FindStringIndex(text[1:])
		if loc == nil {
			break
		}
		cut := loc[0] + 1
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	return append(parts, text)
}

func (c *Console) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Lines returns a copy of every complete line so far.
func (c *Console) Lines() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// Find returns the first line at or after index from that m matches,
// without waiting.
func (c *Console) Find(from int, m Matcher) (Line, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok, _ := c.findLocked(from, m)
	return l, ok
}

// findLocked also returns the index at which a later search may resume.
func (c *Console) findLocked(from int, m Matcher) (Line, bool, int) {
	for i := max(from, 0); i < len(c.lines); i++ {
		if m.MatchString(c.lines[i].Text) {
			return c.lines[i], true, i
		}
	}
	return Line{}, false, len(c.lines)
}

// WaitFor returns the first line, printed before or after the call, that m
// matches. It fails when ctx is done or the console closes first.
func (c *Console) WaitFor(ctx context.Context, m Matcher) (Line, error) {
	return c.WaitFrom(ctx, 0, m)
}

// WaitFrom is WaitFor for lines at or after index from: pass the Index of
// an earlier line plus one to wait for something that follows it, such as
// the second boot after a reboot.
func (c *Console) WaitFrom(ctx context.Context, from int, m Matcher) (Line, error) {
	for {
		c.mu.Lock()
		l, ok, next := c.findLocked(from, m)
		closed, changed := c.closed, c.changed
		c.mu.Unlock()
		if ok {
			return l, nil
		}
		if closed {
			return Line{}, fmt.Errorf("waiting for %v: %w", m, ErrConsoleClosed)
		}
		from = next
		select {
		case <-changed:
		case <-ctx.Done():
			return Line{}, fmt.Errorf("waiting for %v: %w", m, context.Cause(ctx))
		}
	}
}

// Tail returns the last n lines as text, one per line, for error messages
// and test logs.
func (c *Console) Tail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := max(len(c.lines)-n, 0)
	var b strings.Builder
	for _, l := range c.lines[start:] {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// cleanLine drops the carriage returns and the terminal control sequences
// (ESC [ parameters final) that firmware and consoles mix into lines.
func cleanLine(raw []byte) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		switch ch := raw[i]; {
		case ch == 0x1b:
			i = skipEscape(raw, i)
		case ch == '\r':
		default:
			b.WriteByte(ch)
		}
	}
	return b.String()
}

// skipEscape returns the index of the last byte of the escape sequence that
// starts at raw[i]. A CSI sequence ends with a byte in 0x40..0x7e; other
// escapes are two bytes long.
func skipEscape(raw []byte, i int) int {
	if i+1 >= len(raw) {
		return i
	}
	if raw[i+1] != '[' {
		return i + 1
	}
	for j := i + 2; j < len(raw); j++ {
		if raw[j] >= 0x40 && raw[j] <= 0x7e {
			return j
		}
	}
	return len(raw) - 1
}
