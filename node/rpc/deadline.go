package rpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// A client sets the deadline of its own calls, or none. A handler that
// waits for a client's message cannot bound that wait with a context of
// its own: a stream's Recv returns only when a message comes or when the
// context gRPC's transport reads the stream under ends, and it then
// answers the client itself, with the code of that context's Err. So
// every call's transport context is made here, before the transport uses
// it (the tap handle runs first), and Expire ends it with Err
// DeadlineExceeded.
//
//	HEADERS ─▶ tap: transport ctx = callContext{WithCancelCause(ctx)}
//	                      ▲                           │
//	      after d: cancel(expiry)                     ▼
//	                      └───── Expire(ctx, d, what) ◀─ handler
//	handler's Recv ends: the client gets DeadlineExceeded
//	handler's other errors: the interceptor makes them DeadlineExceeded,
//	                        saying what did not happen in time

// cancelKey is the context key of a call's cancelCall.
type cancelKey struct{}

// cancelCall ends a call of a Server with a cause.
type cancelCall context.CancelCauseFunc

// tapCall gives every call a transport context that Expire can end. Its
// cancel function lives in the context: the transport ends the parent
// when the call ends, which ends this one too.
func tapCall(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	return callContext{context.WithValue(ctx, cancelKey{}, cancelCall(cancel))}, nil
}

// callContext is a call's transport context, whose Err is
// DeadlineExceeded once Expire ended it: gRPC turns that into the code
// the client gets when a Recv or Send blocked in the transport ends.
type callContext struct{ context.Context }

func (c callContext) Err() error {
	err := c.Context.Err()
	var e *expiry
	if err != nil && errors.As(context.Cause(c.Context), &e) {
		return context.DeadlineExceeded
	}
	return err
}

// expiry is the cause with which Expire ends a call.
type expiry struct {
	what  string
	after time.Duration
}

func (e *expiry) Error() string {
	return fmt.Sprintf("%s (the server allows %s)", e.what, e.after)
}

// Expire ends the call of ctx, a handler's context on a Server, once d has
// passed, unless the call ends first or stop is called. A Recv or Send
// waiting for the client returns, and the client gets DeadlineExceeded:
// in gRPC's words ("context deadline exceeded") when the handler was
// waiting in Recv, which answers the client at once; otherwise, when the
// handler returns an error, saying what did not happen in time ("no hello
// came"). Use it where a caller could otherwise hold a call open for
// free, as an unauthenticated one can. Outside a call of a Server it does
// nothing.
func Expire(ctx context.Context, d time.Duration, what string) (stop func() bool) {
	cancel, ok := ctx.Value(cancelKey{}).(cancelCall)
	if !ok {
		return func() bool { return false }
	}
	cause := &expiry{what: what, after: d}
	return time.AfterFunc(d, func() { cancel(cause) }).Stop
}

// expired gives err, the error of a call of method whose handler ran
// under ctx, the code DeadlineExceeded when Expire ended the call: the
// handler saw its Recv cancelled, the client should learn why.
func expired(ctx context.Context, method string, err error) error {
	var e *expiry
	if err == nil || !errors.As(context.Cause(ctx), &e) {
		return err
	}
	return status.Errorf(codes.DeadlineExceeded, "%s: %v", method, e)
}
