package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// run runs cairnctl with args against the configuration directory dir,
// in-process, and returns what it printed.
func run(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := runTo(ctx, &out, dir, args...)
	return out.String(), err
}

// runTo runs cairnctl until it returns or ctx ends, printing to out.
func runTo(ctx context.Context, out io.Writer, dir string, args ...string) error {
	return runApp(ctx, out, dir, nil, args...)
}

// runApp is runTo with the app changed by configure first, when not nil.
func runApp(ctx context.Context, out io.Writer, dir string, configure func(*app), args ...string) error {
	a := newApp(out, io.Discard)
	a.now = func() time.Time { return testNow }
	// Loopback connects in far less; a hung endpoint gives way sooner.
	a.connectTimeout = 2 * time.Second
	if configure != nil {
		configure(a)
	}
	root := newRootCommand(a)
	if dir != "" {
		args = append([]string{"--config", dir}, args...)
	}
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// mustRun is run that fails the test on an error.
func mustRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := run(t, dir, args...)
	if err != nil {
		t.Fatalf("cairnctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// testNow is the clock of commands run by tests.
var testNow = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
