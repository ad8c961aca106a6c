package api

import (
	"fmt"

	"cairn.dev/cairn/pkg/logtree"
)

// Written by hand: `make proto` deletes and regenerates only the .pb.go
// files.

// LogSeverityOf returns the wire form of a log tree severity. A severity
// logtree does not define is sent as INFO.
func LogSeverityOf(s logtree.Severity) LogSeverity {
	switch s {
	case logtree.WARNING:
		return LogSeverity_LOG_SEVERITY_WARNING
	case logtree.ERROR:
		return LogSeverity_LOG_SEVERITY_ERROR
	case logtree.FATAL:
		return LogSeverity_LOG_SEVERITY_FATAL
	default:
		return LogSeverity_LOG_SEVERITY_INFO
	}
}

// LogtreeSeverity returns the log tree severity of a wire severity.
// UNSPECIFIED is INFO, which as a minimum lets everything through; a value
// this build does not know is an error.
func LogtreeSeverity(s LogSeverity) (logtree.Severity, error) {
	switch s {
	case LogSeverity_LOG_SEVERITY_UNSPECIFIED, LogSeverity_LOG_SEVERITY_INFO:
		return logtree.INFO, nil
	case LogSeverity_LOG_SEVERITY_WARNING:
		return logtree.WARNING, nil
	case LogSeverity_LOG_SEVERITY_ERROR:
		return logtree.ERROR, nil
	case LogSeverity_LOG_SEVERITY_FATAL:
		return logtree.FATAL, nil
	default:
		return logtree.INFO, fmt.Errorf("unknown log severity %d", int32(s))
	}
}

// LogEntryOf converts a log tree entry to its protobuf form.
func LogEntryOf(e *logtree.LogEntry) *LogEntry {
	return &LogEntry{
		TimeUnixNanos: e.Time.UnixNano(),
		Dn:            string(e.DN),
		Severity:      LogSeverityOf(e.Severity),
		File:          e.File,
		Line:          int32(e.Line),
		Message:       e.Message,
		Raw:           e.Raw,
	}
}
