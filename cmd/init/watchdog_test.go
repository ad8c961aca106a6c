package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWatchdogFeederAbsent: with no device, the feeder says nothing and
// arms nothing, tick after tick, until the driver is loaded.
func TestWatchdogFeederAbsent(t *testing.T) {
	var out bytes.Buffer
	w := &watchdogFeeder{con: &consoles{out: []io.Writer{&out}}, path: filepath.Join(t.TempDir(), "watchdog0")}
	w.tick()
	w.tick()
	if w.dev != nil || out.Len() != 0 {
		t.Errorf("without a device: armed %v, said %q; want neither", w.dev != nil, out.String())
	}
	w.start = time.Now()
	if got := w.interval(); got != watchdogLook {
		t.Errorf("early in the boot it looks every %v, want %v", got, watchdogLook)
	}
	w.start = time.Now().Add(-watchdogEarly)
	if got := w.interval(); got != watchdogFeed {
		t.Errorf("later it looks every %v, want %v", got, watchdogFeed)
	}
	w.disarm()
}

// TestWatchdogFeederNotADevice: a file that is no watchdog is said once,
// not at every tick, and never armed.
func TestWatchdogFeederNotADevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "watchdog0")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := &watchdogFeeder{con: &consoles{out: []io.Writer{&out}}, path: path}
	for range 3 {
		w.tick()
	}
	if w.dev != nil {
		t.Error("a regular file was armed as a watchdog")
	}
	if n := strings.Count(out.String(), "not armed"); n != 1 {
		t.Errorf("said %q, want one line saying the watchdog is not armed", out.String())
	}
}
