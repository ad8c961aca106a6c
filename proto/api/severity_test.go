package api

import (
	"testing"

	"cairn.dev/cairn/pkg/logtree"
)

func TestLogSeverityRoundTrip(t *testing.T) {
	for _, s := range []logtree.Severity{logtree.INFO, logtree.WARNING, logtree.ERROR, logtree.FATAL} {
		w := LogSeverityOf(s)
		got, err := LogtreeSeverity(w)
		if err != nil || got != s {
			t.Errorf("LogtreeSeverity(LogSeverityOf(%v) = %v) = %v, %v; want %v, nil", s, w, got, err, s)
		}
	}
}

func TestLogtreeSeverity(t *testing.T) {
	for _, tc := range []struct {
		in      LogSeverity
		want    logtree.Severity
		wantErr bool
	}{
		{LogSeverity_LOG_SEVERITY_UNSPECIFIED, logtree.INFO, false},
		{LogSeverity_LOG_SEVERITY_INFO, logtree.INFO, false},
		{LogSeverity_LOG_SEVERITY_FATAL, logtree.FATAL, false},
		{LogSeverity(99), logtree.INFO, true},
	} {
		got, err := LogtreeSeverity(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("LogtreeSeverity(%v) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
