//go:build cairntest

package testhooks

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/testpoint"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/event"
)

// This file and the other files built with the tag cairntest are the test
// hooks themselves (testhooks.go says what they are).

// Built says whether this /init carries the test hooks.
const Built = true

// Test-only kernel command-line flags.
const (
	// flagTestRootFail makes the root runnable fail at once, so that
	// end-to-end tests can see the node report the failure and reboot.
	flagTestRootFail = Prefix + "root-fail"
	// flagTestStorageKeys sets up the data partition without enrolment:
	// "cairn.test.storage-keys=<node key>:<cluster key>", each
	// localstorage.KeySize bytes in hex. The keys are on the command line
	// in plaintext.
	flagTestStorageKeys = Prefix + "storage-keys"
	// flagTestEcho runs a TCP echo server: "cairn.test.echo=<port>".
	flagTestEcho = Prefix + "echo"
	// flagTestMarker writes text to /data/marker once the data partition
	// is mounted, or reports the marker found there:
	// "cairn.test.marker=<text>".
	flagTestMarker = Prefix + "marker"
	// flagTestDial dials an echo server (another node's cairn.test.echo)
	// once the node has an address, and reports whether the echo came
	// back: "cairn.test.dial=<ip>:<port>".
	flagTestDial = Prefix + "dial"
	// flagTestStopAt stops the node at a step of its first boot, so that
	// a test can cut its power there: "cairn.test.stop-at=<step>", one of
	// node/testpoint's Steps. The node states the marker
	// test-point-reached and goes no further.
	flagTestStopAt = Prefix + "stop-at"
	// flagTestRun runs the Go test binaries (*.test) of a directory of
	// the initramfs once the data partition is mounted (with
	// cairn.test.storage-keys), their output on the consoles:
	// "cairn.test.run=<directory>".
	flagTestRun = Prefix + "run"
	// flagTestStarveWatchdog makes PID 1 stop feeding the hardware
	// watchdog once it armed it and freeze the core (SIGSTOP), so that
	// the machine hangs and is reset as a hung one would be:
	// "cairn.test.starve-watchdog".
	flagTestStarveWatchdog = Prefix + "starve-watchdog"
	// flagTestHangReboot makes PID 1 ask for a reboot once it armed the
	// hardware watchdog, and halt the kernel at its end instead of
	// restarting the machine, so that the machine stops on its way down
	// as one whose kernel hangs there: "cairn.test.hang-reboot".
	flagTestHangReboot = Prefix + "hang-reboot"
	// flagTestHoldCuratorPort listens on the curator's port on every
	// address from the start, so that the node's own curator can never
	// serve: a release that boots and enrols but never becomes healthy.
	// "cairn.test.hold-curator-port".
	flagTestHoldCuratorPort = Prefix + "hold-curator-port"
	// flagTestUnsealAgain waits until enrolment has ended unsealing for
	// the boot (PCR 11 changes), then unseals the sealed configuration
	// again, as a join does, and says on the console whether the TPM
	// refused: "cairn.test.unseal-again".
	flagTestUnsealAgain = Prefix + "unseal-again"
)

// StarveWatchdog says whether c asks PID 1 to stop feeding the watchdog
// (flagTestStarveWatchdog). PID 1 reads it itself: it parses no other
// flag.
func StarveWatchdog(c cmdline.Cmdline) bool {
	_, ok := c.Lookup(flagTestStarveWatchdog)
	return ok
}

// HangReboot says whether c asks PID 1 to reboot once it armed the
// watchdog and to halt the kernel instead of restarting the machine
// (flagTestHangReboot). PID 1 reads it itself.
func HangReboot(c cmdline.Cmdline) bool {
	_, ok := c.Lookup(flagTestHangReboot)
	return ok
}

// Flags are the test-only flags of the kernel command line.
type Flags struct {
	// rootFail makes the root runnable fail.
	rootFail bool
	// storageKeys says the two keys below were given.
	storageKeys bool
	// nodeKey and clusterKey key the data partition.
	nodeKey, clusterKey [localstorage.KeySize]byte
	// echoPort is the port of the echo server; 0 for none.
	echoPort int
	// marker is the text of /data/marker; "" for none.
	marker string
	// dial is the echo server to dial; invalid for none.
	dial netip.AddrPort
	// stopAt is the step to stop at; "" for none.
	stopAt testpoint.Step
	// run is the directory of test binaries to run; "" for none.
	run string
	// holdCuratorPort keeps the curator's port from the curator.
	holdCuratorPort bool
	// unsealAgain tries a second unseal in the boot.
	unsealAgain bool
}

// Parse reads the test-only flags from c; a flag it cannot use is left
// unset and named in a note.
func Parse(c cmdline.Cmdline) (f Flags, notes []string) {
	f.rootFail = c.Flag(flagTestRootFail)
	f.holdCuratorPort = c.Flag(flagTestHoldCuratorPort)
	f.unsealAgain = c.Flag(flagTestUnsealAgain)
	if p, ok := c.Lookup(flagTestStorageKeys); ok {
		if err := parseStorageKeys(p.Value, &f.nodeKey, &f.clusterKey); err != nil {
			notes = append(notes, fmt.Sprintf("ignoring %s: %v", flagTestStorageKeys, err))
		} else {
			f.storageKeys = true
		}
	}
	if p, ok := c.Lookup(flagTestEcho); ok {
		port, err := strconv.ParseUint(p.Value, 10, 16)
		if err != nil || port == 0 {
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: not a TCP port", flagTestEcho, p.Value))
		} else {
			f.echoPort = int(port)
		}
	}
	if p, ok := c.Lookup(flagTestMarker); ok && p.Value != "" {
		f.marker = p.Value
	}
	if p, ok := c.Lookup(flagTestDial); ok {
		ap, err := netip.ParseAddrPort(p.Value)
		if err != nil {
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: %v", flagTestDial, p.Value, err))
		} else {
			f.dial = ap
		}
	}
	if p, ok := c.Lookup(flagTestRun); ok {
		if !strings.HasPrefix(p.Value, "/") {
			notes = append(notes, fmt.Sprintf("ignoring %s=%s: not an absolute path", flagTestRun, p.Value))
		} else {
			f.run = p.Value
		}
	}
	if p, ok := c.Lookup(flagTestStopAt); ok {
		step, err := testpoint.Parse(p.Value)
		if err != nil {
			notes = append(notes, fmt.Sprintf("ignoring %s: %v", flagTestStopAt, err))
		} else {
			f.stopAt = step
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

// errTestRootFail is the root's error under cairn.test.root-fail.
var errTestRootFail = errors.New("failing on purpose: " + flagTestRootFail + " is set on the kernel command line (test-only flag)")

// RootFailure is the error the root runnable fails with at once, or nil.
func (f Flags) RootFailure() error {
	if f.rootFail {
		return errTestRootFail
	}
	return nil
}

// ArmTestPoint returns the context for the supervision tree: ctx, armed
// to stop at the step of cairn.test.stop-at when it is given.
func (f Flags) ArmTestPoint(ctx context.Context) context.Context {
	if f.stopAt == "" {
		return ctx
	}
	return testpoint.WithStopAt(ctx, f.stopAt)
}

// Services are the test services the flags ask for; the dial client
// waits for address, and says what came back with printf; the second
// unseal reads the sealed configuration at sealedPath.
func (f Flags) Services(address event.Watchable[netip.Prefix], sealedPath string, printf func(string, ...any)) []Service {
	var ss []Service
	if f.echoPort != 0 {
		ss = append(ss, Service{"test-echo", echoRunnable(f.echoPort)})
	}
	if f.dial.IsValid() {
		ss = append(ss, Service{"test-dial", dialRunnable(f.dial, address, printf)})
	}
	if f.holdCuratorPort {
		ss = append(ss, Service{"test-hold-curator-port", holdRunnable(ports.Curator, printf)})
	}
	if f.unsealAgain {
		ss = append(ss, Service{"test-unseal-again", unsealAgainRunnable(sealedPath, printf)})
	}
	return ss
}
