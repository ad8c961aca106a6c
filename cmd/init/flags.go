package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"cairn.dev/cairn/node/localstorage"
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
	// flagTestStorageKeys is for tests only, until enrolment hands the
	// node its keys: "cairn.test.storage-keys=<node key>:<cluster key>",
	// each localstorage.KeySize bytes in hex. With it the node sets up or
	// opens its encrypted data partition and mounts it at /data. The keys
	// are on the command line in plaintext: never set it on a real node.
	flagTestStorageKeys = "cairn.test.storage-keys"
	// flagTestEcho is for tests only: "cairn.test.echo=<port>" runs a TCP
	// echo server on that port, for tests of the node's network.
	flagTestEcho = "cairn.test.echo"
	// flagTestMarker is for tests only: "cairn.test.marker=<text>" writes
	// text to /data/marker once the data partition is mounted, or reports
	// the marker found there, for tests that reboot a node.
	flagTestMarker = "cairn.test.marker"
	// flagTestDial is for tests only: "cairn.test.dial=<ip>:<port>" dials
	// an echo server (another node's cairn.test.echo) once the node has an
	// address, and reports whether the echo came back.
	flagTestDial = "cairn.test.dial"
)

// flags are the settings init takes from the kernel command line.
type flags struct {
	// logSeverity is the least severity of entries on the consoles.
	logSeverity logtree.Severity
	// testRootFail makes the root runnable fail (test-only).
	testRootFail bool
	// testStorageKeys says the two keys below were given (test-only).
	testStorageKeys bool
	// testNodeKey and testClusterKey key the data partition (test-only).
	testNodeKey, testClusterKey [localstorage.KeySize]byte
	// testEchoPort is the port of the echo server; 0 for none (test-only).
	testEchoPort int
	// testMarker is the text of /data/marker; "" for none (test-only).
	testMarker string
	// testDial is the echo server to dial; invalid for none (test-only).
	testDial netip.AddrPort
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
	if p, ok := c.Lookup(flagTestStorageKeys); ok {
		if err := parseStorageKeys(p.Value, &f.testNodeKey, &f.testClusterKey); err != nil {
			notes = append(notes, fmt.Sprintf("ignoring %s: %v", flagTestStorageKeys, err))
		} else {
			f.testStorageKeys = true
		}
	}
	if p, ok := c.Lookup(flagTestEcho); ok {
		port, err := strconv.ParseUint(p.Value, 10, 16)
		if err != nil || port == 0 {
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: not a TCP port", flagTestEcho, p.Value))
		} else {
			f.testEchoPort = int(port)
		}
	}
	if p, ok := c.Lookup(flagTestMarker); ok && p.Value != "" {
		f.testMarker = p.Value
	}
	if p, ok := c.Lookup(flagTestDial); ok {
		ap, err := netip.ParseAddrPort(p.Value)
		if err != nil {
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: %v", flagTestDial, p.Value, err))
		} else {
			f.testDial = ap
		}
	}
	return f, notes
}

// parseStorageKeys decodes "<node key>:<cluster key>" in hex into node and
// cluster. Its errors never quote the keys.
func parseStorageKeys(v string, node, cluster *[localstorage.KeySize]byte) error {
	n, c, ok := strings.Cut(v, ":")
	if !ok {
		return fmt.Errorf("want <node key>:<cluster key>, found no colon")
	}
	for _, k := range []struct {
		name string
		hex  string
		out  []byte
	}{{"node key", n, node[:]}, {"cluster key", c, cluster[:]}} {
		if len(k.hex) != 2*localstorage.KeySize {
			return fmt.Errorf("%s has %d hex digits, want %d", k.name, len(k.hex), 2*localstorage.KeySize)
		}
		if _, err := hex.Decode(k.out, []byte(k.hex)); err != nil {
			return fmt.Errorf("%s is not hex", k.name)
		}
	}
	return nil
}
