// Package tcpproxy forwards TCP connections to the first of several
// backends that answers: a node's kubelet reaches every controller's
// apiserver through one address on the loopback this way.
//
//	client ──▶ listener ──▶ backend i (the one that last answered)
//	                    └─▶ backend i+1, ... when it does not
package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// DialTimeout bounds one attempt to reach a backend.
const DialTimeout = 2 * time.Second

// Backends is the set of addresses a proxy forwards to, safe for
// concurrent use. The zero value has none.
type Backends struct {
	mu    sync.Mutex
	addrs []string
	// good is the index in addrs of the backend that answered last.
	good int
}

// Set replaces the backends with addrs and reports whether they changed.
func (b *Backends) Set(addrs []string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Equal(b.addrs, addrs) {
		return false
	}
	b.addrs = slices.Clone(addrs)
	b.good = 0
	return true
}

// order returns the backends to try, the one that answered last first.
func (b *Backends) order() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.addrs)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, b.addrs[(b.good+i)%n])
	}
	return out
}

// answered records that addr answered.
func (b *Backends) answered(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.addrs, addr); i >= 0 {
		b.good = i
	}
}

// Dial connects to the first backend that answers, the one that answered
// last first.
func (b *Backends) Dial(ctx context.Context) (net.Conn, error) {
	addrs := b.order()
	if len(addrs) == 0 {
		return nil, errors.New("no backend known")
	}
	var errs []error
	d := net.Dialer{Timeout: DialTimeout}
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			b.answered(a)
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no backend answered: %w", errors.Join(errs...))
}

// Serve accepts connections on lis and forwards each to b until ctx ends;
// then it closes lis and every forwarded connection and returns ctx's
// error. A connection no backend takes is closed.
func Serve(ctx context.Context, lis net.Listener, b *Backends) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { lis.Close() })
	defer stop()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lis.Close()
			return fmt.Errorf("when accepting: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			forward(ctx, c, b)
		}()
	}
}

// forward joins c to a backend until either side is done or ctx ends.
func forward(ctx context.Context, c net.Conn, b *Backends) {
	defer c.Close()
	up, err := b.Dial(ctx)
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() {
		c.Close()
		up.Close()
	})
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction can drain; fall back to a
		// full close for connections without it.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
