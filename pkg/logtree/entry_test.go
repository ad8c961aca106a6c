package logtree

import (
	"testing"
	"time"
)

func TestLogEntryString(t *testing.T) {
	at := time.Date(2025, time.November, 23, 10, 27, 0, 123456789, time.UTC)
	early := time.Date(2026, time.February, 3, 4, 5, 6, 7000, time.UTC)
	for _, tc := range []struct {
		name string
		e    LogEntry
		want string
	}{
		{
			name: "info",
			e:    LogEntry{Time: at, DN: "root.net", Severity: INFO, File: "dhcp.go", Line: 42, Message: "message"},
			want: "I1123 10:27:00.123456 root.net dhcp.go:42] message",
		},
		{
			name: "padding",
			e:    LogEntry{Time: early, DN: "a", Severity: WARNING, File: "x.go", Line: 7, Message: "m"},
			want: "W0203 04:05:06.000007 a x.go:7] m",
		},
		{
			name: "error",
			e:    LogEntry{Time: at, DN: "a.b", Severity: ERROR, File: "f.go", Line: 1, Message: "bad"},
			want: "E1123 10:27:00.123456 a.b f.go:1] bad",
		},
		{
			name: "fatal",
			e:    LogEntry{Time: at, DN: "a", Severity: FATAL, File: "f.go", Line: 1000, Message: "dead"},
			want: "F1123 10:27:00.123456 a f.go:1000] dead",
		},
		{
			name: "raw",
			e:    LogEntry{Time: at, DN: "root.net", Severity: INFO, Message: "message", Raw: true},
			want: "R1123 10:27:00.123456 root.net] message",
		},
		{
			name: "root DN",
			e:    LogEntry{Time: at, Severity: INFO, File: "main.go", Line: 3, Message: "up"},
			want: "I1123 10:27:00.123456 main.go:3] up",
		},
		{
			name: "no source",
			e:    LogEntry{Time: at, DN: "a", Severity: WARNING, Message: "note"},
			want: "W1123 10:27:00.123456 a] note",
		},
		{
			name: "multi-line",
			e:    LogEntry{Time: at, DN: "a", Severity: ERROR, File: "f.go", Line: 9, Message: "one\ntwo\n\nfour"},
			want: "E1123 10:27:00.123456 a f.go:9] one\n" +
				"E1123 10:27:00.123456 a f.go:9] two\n" +
				"E1123 10:27:00.123456 a f.go:9] \n" +
				"E1123 10:27:00.123456 a f.go:9] four",
		},
		{
			name: "empty message",
			e:    LogEntry{Time: at, DN: "a", Raw: true},
			want: "R1123 10:27:00.123456 a] ",
		},
		{
			name: "unknown severity",
			e:    LogEntry{Time: at, DN: "a", Severity: Severity(9), File: "f.go", Line: 1, Message: "?"},
			want: "?1123 10:27:00.123456 a f.go:1] ?",
		},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%s: String() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAppendPadded(t *testing.T) {
	for _, tc := range []struct {
		v, width int
		want     string
	}{
		{0, 2, "00"},
		{7, 2, "07"},
		{12, 2, "12"},
		{123, 6, "000123"},
		{999999, 6, "999999"},
	} {
		if got := string(appendPadded(nil, tc.v, tc.width)); got != tc.want {
			t.Errorf("appendPadded(%d, %d) = %q, want %q", tc.v, tc.width, got, tc.want)
		}
	}
}
