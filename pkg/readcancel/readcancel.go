// Package readcancel ends a read that blocks in Go's poller (on an
// os.File of a non-blocking descriptor, or a net.Conn) when a context
// ends, by setting a read deadline in the past.
//
// A file read this way is read again by later calls, each under its own
// context: Bind clears the deadline a former call's context may have set,
// and the func that returns from Bind does not return while that setting
// is still under way, so that a late one cannot land after the next
// call's clearing and end that call's read at once.
package readcancel

import (
	"context"
	"fmt"
	"time"
)

// Reader is what has a read deadline: an *os.File, a net.Conn.
type Reader interface {
	SetReadDeadline(time.Time) error
}

// past is the read deadline that ends a blocked read: any time gone by.
var past = time.Unix(1, 0)

// Bind clears r's read deadline and, once ctx is done, sets one in the
// past, which makes a blocked read of r return os.ErrDeadlineExceeded.
// Call release when the reads under ctx are done: it stops the binding
// and returns once no deadline of it is being set, or will be.
func Bind(ctx context.Context, r Reader) (release func(), err error) {
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("when clearing the read deadline: %w", err)
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = r.SetReadDeadline(past)
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
		}
	}, nil
}
