//go:build !cairntest

package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
)

// A production /init has no test hooks (testhooks.go holds them, for test
// images only): it reads no test flag, runs no test service and never
// sets the data partition up outside enrolment.

// testHooksBuilt says whether this /init carries the test hooks.
const testHooksBuilt = false

// testFlags holds nothing in a production build.
type testFlags struct{}

// parseTestFlags names every test-only flag on the command line in one
// note, and ignores them.
func parseTestFlags(c cmdline.Cmdline) (testFlags, []string) {
	var ignored []string
	for _, p := range c {
		if strings.HasPrefix(strings.ReplaceAll(p.Key, "_", "-"), testFlagPrefix) {
			ignored = append(ignored, p.Key)
		}
	}
	if len(ignored) == 0 {
		return testFlags{}, nil
	}
	return testFlags{}, []string{fmt.Sprintf("ignoring %s: this /init is a production build, without test hooks", strings.Join(ignored, ", "))}
}

func (testFlags) rootFailure() error { return nil }

// armTestPoint returns ctx as it is: no step is ever armed.
func (testFlags) armTestPoint(ctx context.Context) context.Context { return ctx }

func (testFlags) children(event.Watchable[netip.Prefix], func(string, ...any)) []child { return nil }

// storageHooks do nothing in a production build.
type storageHooks struct{}

func newStorageHooks(testFlags) storageHooks { return storageHooks{} }

func (*storageHooks) run(context.Context, *storage, logtree.LeveledLogger) error { return nil }
