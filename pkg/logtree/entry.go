package logtree

import (
	"strconv"
	"strings"
	"time"
)

// LogEntry is one entry of the log tree: a message from a leveled logger, or
// one line written to a raw logger.
//
// Entries handed out by the tree are shared between every reader that sees
// them and must not be modified.
type LogEntry struct {
	// Time is when the tree accepted the entry.
	Time time.Time
	// DN is the node the entry was logged to.
	DN DN
	// Severity is the entry's severity; INFO for raw entries.
	Severity Severity
	// File is the base name of the source file that logged the entry, ""
	// for raw entries and for notes the tree writes itself.
	File string
	// Line is the line in File, 0 when File is "".
	Line int
	// Message is the text of the entry, without a trailing newline. Leveled
	// messages may span several lines; raw messages never do.
	Message string
	// Raw is true for entries written through a raw logger.
	Raw bool
}

// String renders the entry in the glog-like form Cairn prints on consoles:
//
//	I1123 10:27:00.123456 root.net dhcp.go:42] message
//	R1123 10:27:00.123456 root.net] message
//
// The first letter is the severity (R for raw entries), then month and day,
// wall-clock time with microseconds, the DN and, for leveled entries, the
// source location. A multi-line message gives one such line per message line,
// joined by newlines, so that every printed line says where it came from.
func (e *LogEntry) String() string {
	return string(e.appendText(make([]byte, 0, 64+len(e.Message))))
}

// appendText appends String's text to b and returns the extended slice.
func (e *LogEntry) appendText(b []byte) []byte {
	msg := e.Message
	for {
		line, rest, more := strings.Cut(msg, "\n")
		b = e.appendHeader(b)
		b = append(b, line...)
		if !more {
			return b
		}
		b = append(b, '\n')
		msg = rest
	}
}

// appendHeader appends everything up to and including "] ".
func (e *LogEntry) appendHeader(b []byte) []byte {
	if e.Raw {
		b = append(b, 'R')
	} else {
		b = append(b, e.Severity.letter())
	}
	_, month, day := e.Time.Date()
	hour, minute, sec := e.Time.Clock()
	b = appendPadded(b, int(month), 2)
	b = appendPadded(b, day, 2)
	b = append(b, ' ')
	b = appendPadded(b, hour, 2)
	b = append(b, ':')
	b = appendPadded(b, minute, 2)
	b = append(b, ':')
	b = appendPadded(b, sec, 2)
	b = append(b, '.')
	b = appendPadded(b, e.Time.Nanosecond()/1000, 6)
	if e.DN != "" {
		b = append(b, ' ')
		b = append(b, e.DN...)
	}
	if e.File != "" && !e.Raw {
		b = append(b, ' ')
		b = append(b, e.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	return append(b, "] "...)
}

// appendPadded appends v, which must be in [0, 10^width), in decimal,
// zero-padded to width digits.
func appendPadded(b []byte, v, width int) []byte {
	var digits [20]byte
	i := len(digits)
	for ; width > 0 && i > 0; width-- {
		i--
		digits[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, digits[i:]...)
}
