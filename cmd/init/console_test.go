package main

import (
	"bytes"
	"io"
	"regexp"
	"testing"
	"time"
)

func TestFormatPhaseLine(t *testing.T) {
	for _, tc := range []struct {
		uptime time.Duration
		msg    string
		want   string
	}{
		{2345678 * time.Microsecond, "supervisor started", "[  2.345678] cairn: supervisor started\n"},
		{0, "x", "[  0.000000] cairn: x\n"},
		{123456*time.Second + 1800*time.Nanosecond, "late", "[123456.000002] cairn: late\n"},
	} {
		if got := formatPhaseLine(tc.uptime, tc.msg); got != tc.want {
			t.Errorf("formatPhaseLine(%v, %q) = %q, want %q", tc.uptime, tc.msg, got, tc.want)
		}
	}
}

func TestConsolesPrintf(t *testing.T) {
	var a, b bytes.Buffer
	c := &consoles{out: []io.Writer{&a, &b}}
	c.Printf("coldplug loaded %d modules", 17)
	re := regexp.MustCompile(`^\[ *[0-9]+\.[0-9]{6}\] cairn: coldplug loaded 17 modules\n$`)
	for i, got := range []string{a.String(), b.String()} {
		if !re.MatchString(got) {
			t.Errorf("console %d got %q, want a line matching %q", i, got, re)
		}
	}
}
