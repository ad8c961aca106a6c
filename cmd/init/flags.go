package main

import (
	"fmt"

	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
)

// Kernel command-line flags read by init.
const (
	// flagLog sets the least severity of log entries the consoles show:
	// "cairn.log=warning". It can only raise the default, INFO.
	flagLog = "cairn.log"
	// flagTestRootFail is for tests only: it makes the root runnable fail
	// at once, so that end-to-end tests can see the node report the failure
	// and reboot. Never set it on a real node.
	flagTestRootFail = "cairn.test.root-fail"
)

// flags are the settings init takes from the kernel command line.
type flags struct {
	// logSeverity is the least severity of entries on the consoles.
	logSeverity logtree.Severity
	// testRootFail makes the root runnable fail (test-only).
	testRootFail bool
}

// parseFlags reads init's flags from the command line c. Problems, such as
// an unknown severity, are returned as notes for the console; the flag then
// keeps its default.
func parseFlags(c cmdline.Cmdline) (f flags, notes []string) {
	f.logSeverity = logtree.INFO
	if p, ok := c.Lookup(flagLog); ok {
		s, err := logtree.ParseSeverity(p.Value)
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: %v", flagLog, p.Value, err))
		case s < logtree.INFO:
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: the consoles show at least INFO", flagLog, p.Value))
		default:
			f.logSeverity = s
		}
	}
	f.testRootFail = c.Flag(flagTestRootFail)
	return f, notes
}
