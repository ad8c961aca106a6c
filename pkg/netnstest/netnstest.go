// Package netnstest gives tests network namespaces of their own, for
// code that programs links, routes and nftables without touching the
// machine's: New makes one, closed when the test ends, and Do runs a
// function inside one, so that the sockets it makes live there. Both need
// root (CAP_SYS_ADMIN). Like pkg/fixture, only tests should import it.
//
// Each namespace is entered on an OS thread that stays locked and dies
// with its goroutine, so no other goroutine ever runs in it by accident.
package netnstest

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// New makes a network namespace, closed when t ends.
func New(t testing.TB) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	err := onThread(func() error {
		var err error
		ns, err = netns.New()
		return err
	})
	if err != nil {
		t.Fatalf("netns.New: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// Do runs f on a thread inside ns and returns its error; sockets f makes
// stay in ns.
func Do(ns netns.NsHandle, f func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return f()
	})
}

// onThread runs f on a locked OS thread that ends with it: a thread that
// changed namespace never goes back to the pool.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- f()
	}()
	return <-errc
}
