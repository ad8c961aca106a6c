//go:build !cairntest

package testhooks

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
)

// A production /init has no test hooks (the files built with the tag
// cairntest hold them, for test images only): it reads no test flag, runs
// no test service and never sets the data partition up outside
// enrolment.

// Built says whether this /init carries the test hooks.
const Built = false

// Flags holds nothing in a production build.
type Flags struct{}

// Parse names every test-only flag on the command line in one note, and
// ignores them.
func Parse(c cmdline.Cmdline) (Flags, []string) {
	var ignored []string
	for _, p := range c {
		if strings.HasPrefix(strings.ReplaceAll(p.Key, "_", "-"), Prefix) {
			ignored = append(ignored, p.Key)
		}
	}
	if len(ignored) == 0 {
		return Flags{}, nil
	}
	return Flags{}, []string{fmt.Sprintf("ignoring %s: this /init is a production build, without test hooks", strings.Join(ignored, ", "))}
}

// RootFailure is nil: the root never fails on purpose.
func (Flags) RootFailure() error { return nil }

// ArmTestPoint returns ctx as it is: no step is ever armed.
func (Flags) ArmTestPoint(ctx context.Context) context.Context { return ctx }

// Services are none.
func (Flags) Services(event.Watchable[netip.Prefix], string, func(string, ...any)) []Service {
	return nil
}

// Storage does nothing in a production build.
type Storage struct{}

// Storage returns hooks that do nothing.
func (Flags) Storage(Disks, string, string, func(string, ...any)) Storage { return Storage{} }

// Run does nothing.
func (*Storage) Run(context.Context, logtree.LeveledLogger) error { return nil }

// StarveWatchdog is false: PID 1 always feeds the watchdog.
func StarveWatchdog(cmdline.Cmdline) bool { return false }

// HangReboot is false: a reboot restarts the machine.
func HangReboot(cmdline.Cmdline) bool { return false }
