package logtree

import (
	"flag"
	"testing"
)

func TestSeverityString(t *testing.T) {
	for _, tc := range []struct {
		s    Severity
		want string
	}{
		{INFO, "INFO"},
		{WARNING, "WARNING"},
		{ERROR, "ERROR"},
		{FATAL, "FATAL"},
		{Severity(7), "Severity(7)"},
		{Severity(-1), "Severity(-1)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("Severity(%d).String() = %q, want %q", int(tc.s), got, tc.want)
		}
	}
}

func TestSeverityOrder(t *testing.T) {
	if !(INFO < WARNING && WARNING < ERROR && ERROR < FATAL) {
		t.Errorf("severities out of order: %d %d %d %d", INFO, WARNING, ERROR, FATAL)
	}
	var zero Severity
	if zero != INFO {
		t.Errorf("zero Severity = %v, want INFO so that a zero minimum filters nothing", zero)
	}
}

func TestParseSeverity(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Severity
		wantErr bool
	}{
		{in: "INFO", want: INFO},
		{in: "info", want: INFO},
		{in: "I", want: INFO},
		{in: "Warning", want: WARNING},
		{in: "warn", want: WARNING},
		{in: "w", want: WARNING},
		{in: " error ", want: ERROR},
		{in: "E", want: ERROR},
		{in: "fatal", want: FATAL},
		{in: "F", want: FATAL},
		{in: "", wantErr: true},
		{in: "debug", wantErr: true},
		{in: "2", wantErr: true},
		{in: "INFOO", wantErr: true},
	} {
		got, err := ParseSeverity(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseSeverity(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSeverity(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestSeverityFlag checks that a Severity works as a command line flag
// through its text methods.
func TestSeverityFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var level Severity
	fs.TextVar(&level, "log-level", WARNING, "lowest severity to print")
	if level != WARNING {
		t.Fatalf("default = %v, want WARNING", level)
	}
	if err := fs.Parse([]string{"-log-level=error"}); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if level != ERROR {
		t.Errorf("after -log-level=error: %v, want ERROR", level)
	}
	fs.SetOutput(nopWriter{})
	if err := fs.Parse([]string{"-log-level=loud"}); err == nil {
		t.Errorf("Parse(-log-level=loud) succeeded, want an error")
	}
	if _, err := Severity(9).MarshalText(); err == nil {
		t.Errorf("Severity(9).MarshalText() succeeded, want an error")
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }
