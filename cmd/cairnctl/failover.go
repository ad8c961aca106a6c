package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// How cairnctl fails over between curators (see failover). Each is well
// under the default --timeout (30 s), and is cut to a share of a shorter
// one (timing).
const (
	// defaultConnectTimeout bounds connecting to one endpoint, TCP and the
	// TLS handshake: an endpoint that accepts connections but never
	// answers (a frozen VM behind a port forward) gives up after it.
	defaultConnectTimeout = 5 * time.Second
	// defaultAttemptTimeout bounds one attempt of a call: a curator that
	// shook hands but does not answer (it forwards to a leader that just
	// died) gives way to another attempt. A curator waits 5 s for an
	// election to end before it answers Unavailable.
	defaultAttemptTimeout = 10 * time.Second
	// defaultHedgeDelay is how long cairnctl waits for an endpoint to
	// connect before it dials the next one as well.
	defaultHedgeDelay = 250 * time.Millisecond
)

// timing paces the failover of one command.
type timing struct {
	// connect bounds connecting to one endpoint.
	connect time.Duration
	// attempt bounds one attempt of a call to the curators.
	attempt time.Duration
	// hedge is how long an endpoint has to connect before the next one is
	// dialled too.
	hedge time.Duration
}

// timing returns the pacing of failover: the defaults (or what tests
// set), cut to a third (connecting) and a half (an attempt) of --timeout,
// so that one silent endpoint never uses up a command's deadline.
func (a *app) timing() timing {
	return timing{
		connect: min(a.connectTimeout, a.timeout/3),
		attempt: min(a.attemptTimeout, a.timeout/2),
		hedge:   a.hedgeDelay,
	}
}

// failover runs f on a connection to one of the curator endpoints eps
// until f succeeds, fails for good, or ctx ends, and returns the endpoint
// that answered. what names the operation for errors ("listing nodes").
//
//	attempt: dial eps[0]; every hedge without a connection, or at once
//	         when one fails, dial the next too; the first connected wins
//	         run f on it, bounded by the attempt timeout
//	  ok ─▶ done    Unavailable, DeadlineExceeded ─▶ wait, attempt again
//	  any other error ─▶ fail          no endpoint connects ─▶ fail
//
// Every curator forwards calls to the leader, so any of them serves; one
// whose machine died costs at most the hedge delay per attempt, and is
// dialled last in later attempts. While leadership moves, the curators
// answer Unavailable (or the attempt times out), and the next attempt
// reaches the new leader as soon as there is one. The calls cairnctl
// makes are safe to repeat: they set a state, or compare what they change.
func failover(ctx context.Context, eps []string, creds credentials.TransportCredentials, t timing, what string, f func(ctx context.Context, conn *grpc.ClientConn) error) (string, error) {
	eps = slices.Clone(eps)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		conn, ep, failed, err := dialFirst(ctx, eps, creds, t)
		if err != nil {
			if ctx.Err() != nil {
				return "", fmt.Errorf("when %s: no curator answered before the deadline (--timeout; %d attempts): %w", what, attempt, err)
			}
			return "", fmt.Errorf("when %s: %w", what, err)
		}
		eps = toBack(eps, failed)
		actx, cancel := context.WithTimeout(ctx, t.attempt)
		err = f(actx, conn)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		conn.Close()
		if err == nil {
			return ep, nil
		}
		if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
			return "", explain(what, ep, err)
		}
		if timedOut {
			// It shook hands but did not answer: try the others first.
			eps = toBack(eps, []string{ep})
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w (gave up at the deadline, --timeout, after %d attempts)", explain(what, ep, err), attempt)
		}
		wait = min(2*wait, time.Second)
	}
}

// toBack moves the endpoints of last to the end of eps, keeping the order
// of both.
func toBack(eps, last []string) []string {
	front := slices.DeleteFunc(slices.Clone(eps), func(ep string) bool { return slices.Contains(last, ep) })
	for _, ep := range eps {
		if slices.Contains(last, ep) {
			front = append(front, ep)
		}
	}
	return front
}

// dialResult is the outcome of dialling one endpoint.
type dialResult struct {
	endpoint string
	conn     *grpc.ClientConn
	err      error
}

// dialFirst connects to one of eps: it dials eps[0] at once, and each next
// endpoint when the one before failed or has not connected within
// t.hedge. The first connection that is ready wins, and every other is
// closed before dialFirst returns: no dial outlives it. It returns the
// winner and the endpoints that failed before it, or why each failed.
func dialFirst(ctx context.Context, eps []string, creds credentials.TransportCredentials, t timing) (*grpc.ClientConn, string, []string, error) {
	if len(eps) == 0 {
		return nil, "", nil, errors.New("no curator endpoint to dial")
	}
	ctx, cancel := context.WithCancel(ctx)
	results := make(chan dialResult, len(eps))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		close(results)
		for r := range results {
			if r.conn != nil {
				r.conn.Close()
			}
		}
	}()
	hedge := time.NewTimer(t.hedge)
	defer hedge.Stop()
	next, pending := 0, 0
	start := func() {
		ep := eps[next]
		next++
		pending++
		wg.Go(func() {
			conn, err := dialReady(ctx, ep, creds, t.connect)
			results <- dialResult{endpoint: ep, conn: conn, err: err}
		})
		hedge.Reset(t.hedge)
	}
	start()
	var failed []string
	var errs []error
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				return r.conn, r.endpoint, failed, nil
			}
			failed, errs = append(failed, r.endpoint), append(errs, r.err)
			if next < len(eps) {
				start()
			}
		case <-hedge.C:
			if next < len(eps) {
				start()
			}
		}
	}
	if len(errs) == 1 {
		return nil, "", failed, errs[0]
	}
	return nil, "", failed, fmt.Errorf("no curator could be reached: %w", errors.Join(errs...))
}

// dialReady connects to endpoint and waits, at most connect, until the
// connection is ready for calls: TCP connected and TLS handshake done. An
// endpoint that cannot be connected to is a *connectError.
func dialReady(ctx context.Context, endpoint string, creds credentials.TransportCredentials, connect time.Duration) (*grpc.ClientConn, error) {
	rec := &connRecorder{TransportCredentials: creds}
	conn, err := grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(rec),
		grpc.WithContextDialer(rec.dial),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: connect}))
	if err != nil {
		return nil, fmt.Errorf("when connecting to %s: %w", endpoint, err)
	}
	cctx, cancel := context.WithTimeout(ctx, connect)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return conn, nil
		}
		if s == connectivity.TransientFailure || s == connectivity.Shutdown || !conn.WaitForStateChange(cctx, s) {
			break
		}
	}
	conn.Close()
	e := rec.failure(endpoint)
	if e.err == nil {
		if err := ctx.Err(); err != nil {
			e.err = err
		} else {
			e.timeout = connect
		}
	}
	return nil, e
}

// connectError says why cairnctl could not connect to an endpoint.
type connectError struct {
	endpoint string
	// accepted is set when a TCP connection was made.
	accepted bool
	// handshake is set when err is the TLS handshake's; closed when the
	// other end closed the connection during it.
	handshake, closed bool
	// timeout is set when the connection was not ready within it.
	timeout time.Duration
	err     error
}

func (e *connectError) Error() string {
	switch {
	case e.closed:
		return fmt.Sprintf("cannot reach %s: it closed the connection before the TLS handshake completed (%v)", e.endpoint, e.err)
	case e.handshake:
		return fmt.Sprintf("%s failed the TLS handshake: %v", e.endpoint, e.err)
	case e.timeout > 0 && e.accepted:
		return fmt.Sprintf("cannot reach %s: it accepted the connection but did not complete the TLS handshake within %s", e.endpoint, e.timeout)
	case e.timeout > 0:
		return fmt.Sprintf("cannot reach %s: no connection within %s", e.endpoint, e.timeout)
	}
	return fmt.Sprintf("cannot reach %s: %v", e.endpoint, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

// connRecorder dials TCP for gRPC and passes TLS handshakes through to
// its credentials, and remembers how the last attempt to connect went:
// gRPC hands such errors on only flattened into a status message.
type connRecorder struct {
	credentials.TransportCredentials

	mu           sync.Mutex
	accepted     bool
	dialErr      error
	handshakeErr error
}

// dial is gRPC's dialer: a plain TCP connection to addr.
func (r *connRecorder) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.dialErr = err
	} else {
		r.accepted = true
	}
	return conn, err
}

// ClientHandshake is the wrapped credentials' handshake, recording its
// error.
func (r *connRecorder) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := r.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil && ctx.Err() == nil {
		r.mu.Lock()
		r.handshakeErr = err
		r.mu.Unlock()
	}
	return conn, info, err
}

// failure is what the recorder saw of a connection to endpoint that did
// not become ready: the handshake's error, else the dial's, else none.
func (r *connRecorder) failure(endpoint string) *connectError {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &connectError{endpoint: endpoint, accepted: r.accepted}
	switch {
	case r.handshakeErr != nil:
		// A port forward whose target is gone accepts, then hangs up.
		e.err, e.handshake = r.handshakeErr, true
		e.closed = errors.Is(e.err, io.EOF) || errors.Is(e.err, syscall.ECONNRESET)
	case r.dialErr != nil && !r.accepted:
		e.err = r.dialErr
	}
	return e
}
