package main

import (
	"fmt"

	"cairn.dev/cairn/node/testhooks"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/logtree"
)

// flagLog sets the least severity of log entries the consoles show:
// "cairn.log=warning". It can only raise the default, INFO.
const flagLog = "cairn.log"

// flags are the settings init takes from the kernel command line.
type flags struct {
	// logSeverity is the least severity of entries on the consoles.
	logSeverity logtree.Severity
	// system names the system partition's slot and its verity
	// parameters (system.go).
	system systemFlags
	// test are the test-only flags (cairn.test.*): only an /init built
	// for test images (build tag cairntest) reads them; a production
	// /init ignores them and says so (node/testhooks).
	test testhooks.Flags
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
	f.system = parseSystemFlags(c)
	var testNotes []string
	f.test, testNotes = testhooks.Parse(c)
	return f, append(notes, testNotes...)
}
