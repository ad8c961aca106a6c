package logtree

import (
	"fmt"
	"strconv"
	"strings"
)

// Severity is the importance of a leveled log entry. Higher values are more
// severe; the zero value is INFO, so a zero minimum lets everything through.
type Severity int8

const (
	// INFO is routine information. Raw entries carry it too.
	INFO Severity = iota
	// WARNING is something unusual that Cairn recovered from.
	WARNING
	// ERROR is a failure of the operation at hand.
	ERROR
	// FATAL is a failure that ends the component that logged it.
	FATAL
)

// String returns the severity's full upper-case name, "INFO" to "FATAL".
func (s Severity) String() string {
	switch s {
	case INFO:
		return "INFO"
	case WARNING:
		return "WARNING"
	case ERROR:
		return "ERROR"
	case FATAL:
		return "FATAL"
	}
	return "Severity(" + strconv.Itoa(int(s)) + ")"
}

// letter is the one-character form used at the start of LogEntry.String.
func (s Severity) letter() byte {
	switch s {
	case INFO:
		return 'I'
	case WARNING:
		return 'W'
	case ERROR:
		return 'E'
	case FATAL:
		return 'F'
	}
	return '?'
}

// ParseSeverity turns a filter flag's value into a Severity. It accepts the
// full names ("warning"), the usual short form "warn" and the single letters
// of LogEntry.String ("W"), in any case.
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "I", "INFO":
		return INFO, nil
	case "W", "WARN", "WARNING":
		return WARNING, nil
	case "E", "ERROR":
		return ERROR, nil
	case "F", "FATAL":
		return FATAL, nil
	}
	return INFO, fmt.Errorf("unknown severity %q, want one of INFO, WARNING, ERROR, FATAL", s)
}

// MarshalText returns the severity's name, so that a Severity can be used
// with flag.TextVar and in text encodings.
func (s Severity) MarshalText() ([]byte, error) {
	if s < INFO || s > FATAL {
		return nil, fmt.Errorf("invalid severity %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses text as ParseSeverity does.
func (s *Severity) UnmarshalText(text []byte) error {
	v, err := ParseSeverity(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
