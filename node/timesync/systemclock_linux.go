package timesync

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// systemClock is the node's clock, CLOCK_REALTIME. Correcting it needs
// CAP_SYS_TIME, which /init has.
type systemClock struct{}

func (systemClock) now() time.Time { return time.Now() }

// step adds d to the clock in one adjtimex call (ADJ_SETOFFSET), which
// the kernel applies atomically: no time passes between reading the
// clock and setting it, as it would with clock_settime. What is left of
// an earlier slew is cancelled: it corrected an offset measured before.
func (c systemClock) step(d time.Duration) error {
	// Whole seconds and non-negative microseconds, as the kernel wants.
	tx := unix.Timex{Modes: unix.ADJ_SETOFFSET, Time: unix.NsecToTimeval(d.Nanoseconds())}
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("adjtimex(ADJ_SETOFFSET): %w", err)
	}
	return c.slew(0)
}

// slew has the kernel run the clock fast or slow until it has gained d
// (ADJ_OFFSET_SINGLESHOT, the adjtime(3) call): 0.5 ms a second at most.
// A new slew replaces what is left of the previous one.
func (systemClock) slew(d time.Duration) error {
	tx := unix.Timex{Modes: unix.ADJ_OFFSET_SINGLESHOT, Offset: d.Microseconds()}
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("adjtimex(ADJ_OFFSET_SINGLESHOT): %w", err)
	}
	return nil
}
