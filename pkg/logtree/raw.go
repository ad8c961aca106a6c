package logtree

import (
	"bytes"
	"io"
	"io/fs"
	"sync"
	"unicode/utf8"
)

// MaxRawLine is the longest raw entry, in bytes. Longer lines are split into
// several entries, so that a process writing without newlines cannot make
// the tree buffer without bound.
const MaxRawLine = 4096

// RawFor returns a writer that turns what is written to it into raw entries
// of the node dn, one per line. A line without its newline yet is held back
// until the newline or Close. Empty parts of dn are dropped, as for
// LeveledFor. The writer is safe for concurrent use; Write never fails
// before Close and fails with fs.ErrClosed after.
func (t *LogTree) RawFor(dn DN) io.WriteCloser {
	n := t.nodeFor(dn.normalized())
	w := &rawWriter{}
	w.lines = lineSplitter{
		limit: MaxRawLine,
		emit: func(line []byte) {
			t.append(n, &entry{LogEntry: LogEntry{
				Severity: INFO,
				Message:  string(line),
				Raw:      true,
			}})
		},
	}
	return w
}

// rawWriter is the io.WriteCloser of RawFor.
type rawWriter struct {
	mu     sync.Mutex
	lines  lineSplitter
	closed bool
}

func (w *rawWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, fs.ErrClosed
	}
	w.lines.write(p)
	return len(p), nil
}

// Close logs a pending partial line. Closing twice is harmless.
func (w *rawWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.lines.flush()
	}
	return nil
}

// lineSplitter cuts a byte stream into lines of at most limit bytes. It
// holds at most limit bytes of an unfinished line.
type lineSplitter struct {
	// limit is the longest line emitted; at least utf8.UTFMax.
	limit int
	// emit receives each line, without its newline. The slice is only
	// valid during the call.
	emit func(line []byte)
	// buf is the unfinished line.
	buf []byte
}

// write feeds p to the splitter.
func (s *lineSplitter) write(p []byte) {
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.add(p)
			return
		}
		if len(s.buf) == 0 && i <= s.limit {
			// A whole line in one piece: no need to copy it.
			s.emit(p[:i])
		} else {
			s.add(p[:i])
			s.emit(s.buf)
			s.buf = s.buf[:0]
		}
		p = p[i+1:]
	}
}

// flush emits the unfinished line, if any.
func (s *lineSplitter) flush() {
	if len(s.buf) > 0 {
		s.emit(s.buf)
		s.buf = s.buf[:0]
	}
}

// add appends b, which holds no newline, to the unfinished line. Whenever the
// line is then known to be longer than limit, its first limit bytes are
// emitted, or a little less if that would cut a UTF-8 character in two.
func (s *lineSplitter) add(b []byte) {
	for len(s.buf)+len(b) > s.limit {
		if len(s.buf) == 0 {
			cut := cutPoint(b, s.limit)
			s.emit(b[:cut])
			b = b[cut:]
			continue
		}
		fill := s.limit - len(s.buf)
		s.buf = append(s.buf, b[:fill]...)
		b = b[fill:]
		cut := cutPoint(s.buf, s.limit)
		s.emit(s.buf[:cut])
		s.buf = append(s.buf[:0], s.buf[cut:]...)
	}
	s.buf = append(s.buf, b...)
}

// cutPoint returns where to cut p, at least limit bytes long, so that the
// first part is at most limit bytes and does not end in the middle of a
// UTF-8 character. Bytes that are not valid UTF-8 are cut at limit.
func cutPoint(p []byte, limit int) int {
	// The last character starting before limit: if it is the valid start
	// of a character that does not end by limit, cut before it.
	for j := limit - 1; j >= 1 && j > limit-utf8.UTFMax; j-- {
		if utf8.RuneStart(p[j]) {
			if !utf8.FullRune(p[j:limit]) {
				return j
			}
			return limit
		}
	}
	return limit
}
