//go:build cairntest

package testhooks

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
)

// The runnables of this file exist for end-to-end tests of the node's
// network only: they start when a cairn.test.* flag asks for them, never
// on a real node.

// echoTimeout bounds one echo connection, so that a client that never
// closes cannot hold the (one at a time) echo server.
const echoTimeout = 10 * time.Second

// echoRunnable is the test-only TCP echo server of cairn.test.echo: it
// sends every byte a client sends straight back, one client at a time.
func echoRunnable(port int) supervisor.Runnable {
	return func(ctx context.Context) error {
		return serveTCP(ctx, port, "echo", echo, func(addr net.Addr) {
			supervisor.Logger(ctx).Infof("Echo server on %s (test-only)", addr)
		})
	}
}

// echo sends what c sends back until c closes or echoTimeout passes.
func echo(ctx context.Context, c net.Conn) {
	log := supervisor.Logger(ctx)
	log.Infof("Echo connection from %s", c.RemoteAddr())
	c.SetDeadline(time.Now().Add(echoTimeout))
	if _, err := io.Copy(c, c); err != nil {
		log.Warningf("Echo connection from %s: %v", c.RemoteAddr(), err)
	}
}

// serveTCP listens on port on every address and hands the connections
// it accepts, one at a time, to handle, in an accept loop under the
// supervisor; each is closed once handled. Listening, it calls
// listening, then holds the port until ctx ends, when closing the
// listener ends the loop. what names the service in errors.
func serveTCP(ctx context.Context, port int, what string, handle func(context.Context, net.Conn), listening func(net.Addr)) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("when listening for %s on port %d: %w", what, port, err)
	}
	defer ln.Close()
	accept := func(ctx context.Context) error {
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		for {
			c, err := ln.Accept()
			if err != nil {
				return fmt.Errorf("when accepting %s connections: %w", what, err)
			}
			handle(ctx, c)
			c.Close()
		}
	}
	if err := supervisor.Run(ctx, "accept", accept); err != nil {
		return fmt.Errorf("when starting the %s accept loop: %w", what, err)
	}
	listening(ln.Addr())
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// dialRunnable is the test-only client of cairn.test.dial: once the node
// has an address it sends a line to the echo server at target, checks
// that the same line comes back and prints "echo from <ip> ok". Failures
// are returned, and the supervisor tries again after a backoff.
func dialRunnable(target netip.AddrPort, address event.Watchable[netip.Prefix], printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		own, err := event.Get(ctx, address, event.Filter(func(p netip.Prefix) bool { return p.IsValid() }))
		if err != nil {
			return err
		}
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", target.String())
		if err != nil {
			return fmt.Errorf("when dialing echo server %s: %w", target, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(echoTimeout))
		msg := "hello from " + own.Addr().String() + "\n"
		if _, err := io.WriteString(c, msg); err != nil {
			return fmt.Errorf("when writing to echo server %s: %w", target, err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("when reading from echo server %s: %w", target, err)
		}
		if got != msg {
			return fmt.Errorf("echo server %s sent %q, want %q", target, got, msg)
		}
		printf("echo from %s ok", target.Addr())
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}
}

// holdRunnable is the test-only service of cairn.test.hold-curator-port:
// it listens on port on every address, which keeps a service that wants
// the port on the node's own address from listening (Linux refuses that
// bind while a wildcard socket listens), and closes every connection it
// accepts at once, so that clients fail fast instead of waiting for a
// handshake. It starts with the supervision tree, long before enrolment
// lets the curator start.
func holdRunnable(port int, printf func(string, ...any)) supervisor.Runnable {
	return func(ctx context.Context) error {
		return serveTCP(ctx, port, "the held port", func(context.Context, net.Conn) {}, func(net.Addr) {
			printf("holding port %d, so that the service that needs it cannot serve (test-only)", port)
		})
	}
}
