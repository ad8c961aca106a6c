package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/logtree"
)

// consoleDevices are the terminals phase lines go to: the first serial
// port, where tests and most hosts read, and the foreground virtual
// terminal, where a person at a screen reads. /dev/console would reach
// only one of them.
var consoleDevices = []string{"/dev/ttyS0", "/dev/tty0"}

// consoles writes phase lines to every console that could be opened, and
// to stderr when none could (before /dev is mounted, or on a machine
// without either).
type consoles struct {
	mu  sync.Mutex
	out []io.Writer
}

// openConsoles opens every console device there is. Devices that are
// missing are skipped without a word: there is no console to say it on.
func openConsoles() *consoles {
	c := &consoles{}
	for _, d := range consoleDevices {
		f, err := os.OpenFile(d, os.O_WRONLY|unix.O_NOCTTY, 0)
		if err != nil {
			continue
		}
		c.out = append(c.out, f)
	}
	return c
}

// Printf writes one phase line, "[    2.345678] cairn: <message>", to
// every console.
func (c *consoles) Printf(format string, args ...any) {
	line := []byte(formatPhaseLine(sinceBoot(), fmt.Sprintf(format, args...)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out) == 0 {
		os.Stderr.Write(line)
		return
	}
	for _, w := range c.out {
		w.Write(line)
	}
}

// formatPhaseLine formats a phase line the way the kernel stamps its own.
func formatPhaseLine(uptime time.Duration, msg string) string {
	return fmt.Sprintf("[%10.6f] cairn: %s\n", uptime.Seconds(), msg)
}

// sinceBoot returns the time since the kernel started. It reads
// CLOCK_BOOTTIME, the clock /proc/uptime reports, directly: /proc/uptime
// rounds it to hundredths, and may not be mounted (yet, or any more).
func sinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// attach copies the entries of lt at min or above to every console, until
// the returned function is called.
func (c *consoles) attach(lt *logtree.LogTree, min logtree.Severity) (stop func()) {
	var stops []func()
	for _, w := range c.out {
		stops = append(stops, lt.Console(w, logtree.ConsoleMinimumSeverity(min),
			// Kubernetes' components log every routine step: on a
			// serial console that would crowd out the node's own
			// story and slow the node down. cairnctl logs has all of it.
			logtree.ConsoleQuiet("root.roleserve.kubecontroller.controller", logtree.WARNING),
			logtree.ConsoleQuiet("root.roleserve.kubeworker.worker", logtree.WARNING)))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
