package timesync

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/pkg/event"
)

// Floor is the earliest time a right clock can read: no Cairn build
// predates it. A clock that reads earlier is known wrong, typically a
// machine whose RTC lost its battery and starts in 1970 or 2000. Move it
// forward now and then; never past the date of a release.
var Floor = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// MaxOffset is how far off an NTP answer may find the clock with the
// clock still right. The service steps larger offsets away; a clock found
// further off that it failed to correct is known wrong.
const MaxOffset = time.Second

// ErrKnownWrong is wrapped by the errors of Check and CheckFloor: the
// clock is known wrong, and times read from it must not be trusted.
var ErrKnownWrong = errors.New("the node's clock is known wrong")

// Sync says how far the clock can be trusted (see the package
// documentation, "Known wrong").
type Sync int

const (
	// Unsynchronized: no NTP server has answered this boot.
	Unsynchronized Sync = iota
	// Synchronized: the clock was corrected to a server's time.
	Synchronized
	// KnownWrong: the clock reads before Floor, or a server found it
	// more than MaxOffset off and correcting it failed.
	KnownWrong
)

func (s Sync) String() string {
	switch s {
	case Unsynchronized:
		return "unsynchronized"
	case Synchronized:
		return "synchronized"
	case KnownWrong:
		return "known wrong"
	}
	return fmt.Sprintf("Sync(%d)", int(s))
}

// State is the clock's state as the service last judged it.
type State struct {
	// Sync is how far the clock can be trusted.
	Sync Sync
	// Server is the NTP server of the last good answer; the zero Addr
	// before one.
	Server netip.Addr
	// Offset is how far that answer found the clock behind the server's
	// (negative: ahead), before the service corrected it.
	Offset time.Duration
	// LastSync is when that answer came, by the corrected clock; zero
	// before one.
	LastSync time.Time
	// Reason says why the clock is KnownWrong; empty in any other state.
	Reason string
}

// CheckFloor returns an error wrapping ErrKnownWrong if now is earlier
// than Floor, and nil otherwise. It is the part of Clock.Check that needs
// nothing but the time.
func CheckFloor(now time.Time) error {
	if now.Before(Floor) {
		return fmt.Errorf("%w: it reads %s, before %s, which no Cairn build predates",
			ErrKnownWrong, now.UTC().Format(time.RFC3339), Floor.Format(time.RFC3339))
	}
	return nil
}

// Clock answers whether the node's clock is known wrong, for code that is
// about to issue or accept a certificate. It reads the State the service
// publishes, and the time itself.
type Clock struct {
	state event.Watchable[State]
	now   func() time.Time
}

// NewClock returns a Clock that follows state, the Value that the node's
// Service publishes. A nil state checks the time against Floor only.
func NewClock(state event.Watchable[State]) *Clock {
	return &Clock{state: state, now: time.Now}
}

// Check returns nil unless the clock is known wrong; then it returns an
// error that wraps ErrKnownWrong and says what is wrong. It never blocks.
// An unsynchronized clock is not known wrong.
func (c *Clock) Check() error {
	if err := CheckFloor(c.now()); err != nil {
		return err
	}
	if c.state == nil {
		return nil
	}
	st, err := event.Get(context.Background(), c.state, event.BacklogOnly[State]())
	if err != nil {
		// Nothing published yet: the service has not judged the clock.
		return nil
	}
	if st.Sync == KnownWrong {
		return fmt.Errorf("%w: %s", ErrKnownWrong, st.Reason)
	}
	return nil
}
